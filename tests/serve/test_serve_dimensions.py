"""`dimensions` on OpenAI's embeddings route and TEI's /embed, and a server over an `index --dim` index.

References: the model's full vectors as the same server gives them, cut to their first N entries
by hand (numpy) and, where the route normalizes, divided by the prefix's norm; the index's own
search (`embedkit search`'s code path) for the served /search.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from serve_helpers import CORPUS, app_client_for

from embedkit.jobs.index_options import IndexOptions

N = 8


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_openai_dimensions_are_the_first_n_renormalized(app_client):
    texts = ["shock waves on a wing", "heat transfer"]
    full = np.array(
        [d["embedding"] for d in app_client.post("/v1/embeddings", json={"input": texts}).json()["data"]]
    )
    response = app_client.post("/v1/embeddings", json={"input": texts, "dimensions": N})
    assert response.status_code == 200, response.text
    cut = np.array([d["embedding"] for d in response.json()["data"]])
    assert cut.shape == (2, N)
    np.testing.assert_allclose(cut, _unit(full[:, :N]), atol=1e-5)
    same = app_client.post("/v1/embeddings", json={"input": texts, "dimensions": full.shape[1]}).json()
    np.testing.assert_allclose([d["embedding"] for d in same["data"]], full, atol=1e-6)


@pytest.mark.parametrize("normalize", [True, False])
def test_tei_dimensions_cut_then_normalize(app_client, normalize: bool):
    texts = ["shock waves on a wing", "heat transfer"]
    # the tiny ONNX model normalizes in its graph: its raw vectors are unit length already
    full = np.array(app_client.post("/embed", json={"inputs": texts}).json())
    response = app_client.post("/embed", json={"inputs": texts, "dimensions": N, "normalize": normalize})
    if not normalize:  # this model refuses raw vectors, whatever the size
        assert response.status_code == 422 and "normalize=false" in response.json()["error"]
        return
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(np.array(response.json()), _unit(full[:, :N]), atol=1e-5)


def test_served_search_on_an_index_of_fewer_dimensions(tiny_onnx: Path, tmp_path):
    from embedkit import SearchIndex, build_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in CORPUS), encoding="utf-8")
    out = build_index(
        corpus, tmp_path / "idx", tiny_onnx, IndexOptions(device="cpu", dim=N, calibrate=False)
    ).path
    with SearchIndex.load(out) as index:
        expected = [h.id for h in index.search_text("shock waves", k=3, mode="dense")[0]]
    with app_client_for(tiny_onnx, out) as client:
        answer = client.post("/search", json={"query": "shock waves", "k": 3, "mode": "dense"})
        assert answer.status_code == 200, answer.text
        assert [hit["id"] for hit in answer.json()["results"][0]["hits"]] == expected
