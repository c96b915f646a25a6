"""A model that is not BERT, brought by a user: `index`, `search` and `embed` with its torch folder and
with its export, against sentence-transformers on the same folder.

A tiny random MPNet with query and document prompts: the dense ranking must be the one
`SentenceTransformer.encode_query` / `encode_document` give, and `embed` must write the vectors its
plain `encode` gives.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_tiny_encoder
from typer.testing import CliRunner

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("onnxruntime")

from embedkit.cli.app import app  # noqa: E402
from embedkit.index.folder import read_index_meta  # noqa: E402

DOCS = [
    "shock wave on the wing at high mach number",
    "heat transfer in the boundary layer",
    "the cat eats food on the beach",
    "pressure and drag of a small body",
    "the patient was given a drug for the disease",
    "a man is playing guitar on the beach",
]
QUERY = "shock wave drag"


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(
        tmp_path_factory.mktemp("mpnet") / "m", "mpnet", prompts={"query": "q: ", "document": "d: "}
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    return path


def reference_ranking(folder: Path) -> tuple[list[str], np.ndarray]:
    model = st.SentenceTransformer(str(folder), device="cpu")
    scores = model.encode_document(DOCS) @ model.encode_query(QUERY)
    order = np.argsort(-scores, kind="stable")
    return [f"d{i}" for i in order], scores[order]


def dense_hits(runner: CliRunner, index: Path) -> tuple[list[str], np.ndarray]:
    result = runner.invoke(
        app, ["search", str(index), QUERY, "--mode", "dense", "--json", "-k", str(len(DOCS))]
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    return [h["id"] for h in hits], np.array([h["score"] for h in hits])


@pytest.mark.parametrize("form", ["torch", "onnx"])
def test_index_and_search_rank_as_sentence_transformers(tmp_path, mpnet, corpus, form):
    runner = CliRunner()
    model = mpnet
    if form == "onnx":
        model = tmp_path / "onnx"
        result = runner.invoke(app, ["export", str(mpnet), "--out", str(model), "--int8"])
        assert result.exit_code == 0, result.output
        assert "no Attention fused" in result.output  # MPNet's attention has a position bias
    index = tmp_path / "idx"
    result = runner.invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(model)])
    assert result.exit_code == 0, result.output
    meta = read_index_meta(index)
    assert (meta["query_prefix"], meta["passage_prefix"]) == ("q: ", "d: ")
    ids, scores = dense_hits(runner, index)
    expected_ids, expected_scores = reference_ranking(mpnet)
    assert ids == expected_ids
    np.testing.assert_allclose(scores, expected_scores, atol=1e-4)


def test_embed_writes_the_vectors_of_a_plain_encode(tmp_path, mpnet, corpus):
    out = tmp_path / "vectors.npy"
    result = CliRunner().invoke(app, ["embed", str(corpus), "--model", str(mpnet), "--out", str(out)])
    assert result.exit_code == 0, result.output
    expected = st.SentenceTransformer(str(mpnet), device="cpu").encode(DOCS)
    np.testing.assert_allclose(np.load(out), expected, atol=2e-6)


@pytest.mark.parametrize("form", ["torch", "onnx"])
def test_the_server_answers_with_the_models_vectors(tmp_path, mpnet, form):
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    import time

    from starlette.testclient import TestClient

    from embedkit.export import export_model
    from embedkit.serve.app import create_app
    from embedkit.serve.engine import Engine
    from embedkit.serve.settings import ServeConfig

    model = mpnet if form == "torch" else export_model(mpnet, tmp_path / "onnx", progress=False).out_dir
    with TestClient(create_app(Engine(ServeConfig(model=str(model), max_wait_ms=0)))) as client:
        for _ in range(500):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.02)
        response = client.post("/v1/embeddings", json={"input": DOCS})
    assert response.status_code == 200, response.text
    served = np.array([item["embedding"] for item in response.json()["data"]])
    expected = st.SentenceTransformer(str(mpnet), device="cpu").encode(DOCS)
    np.testing.assert_allclose(served, expected, atol=2e-5)
