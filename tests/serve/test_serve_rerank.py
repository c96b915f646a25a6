"""TEI's `POST /rerank` and `/search`'s `rerank_depth` against sentence-transformers'
`CrossEncoder.predict` on the same tiny random cross-encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from serve_helpers import in_process

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("starlette")
pytest.importorskip("httpx")

QUERY = "shock wave on the wing"
TEXTS = [
    "the wing flow is high",
    "a man is playing guitar on the beach",
    "drag and lift of a small body",
    "cat",
]


@pytest.fixture(scope="module")
def client(app_client):
    return app_client  # the tiny model, its index and the tiny cross-encoder


@pytest.fixture(scope="module")
def client_without_reranker(tiny_onnx: Path, tiny_index: Path):
    from embedkit.serve.settings import ServeConfig

    with in_process(ServeConfig(model=str(tiny_onnx), index=str(tiny_index), max_wait_ms=0)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def reference(tiny_cross_encoder: Path):
    return st.CrossEncoder(str(tiny_cross_encoder), device="cpu")


def test_rerank_answers_cross_encoder_predict_best_first(client, reference):
    expected = reference.predict([(QUERY, t) for t in TEXTS])
    response = client.post("/rerank", json={"query": QUERY, "texts": TEXTS, "return_text": True})
    assert response.status_code == 200, response.text
    ranks = response.json()
    order = list(np.argsort(-expected, kind="stable"))
    assert [r["index"] for r in ranks] == order
    np.testing.assert_allclose([r["score"] for r in ranks], expected[order], atol=2e-6)
    assert [r["text"] for r in ranks] == [TEXTS[i] for i in order]


def test_raw_scores_are_the_logits(client, reference):
    expected = reference.predict([(QUERY, t) for t in TEXTS], activation_fn=torch.nn.Identity())
    ranks = client.post("/rerank", json={"query": QUERY, "texts": TEXTS, "raw_scores": True}).json()
    by_index = {r["index"]: r["score"] for r in ranks}
    np.testing.assert_allclose([by_index[i] for i in range(len(TEXTS))], expected, atol=2e-5)
    assert "text" not in ranks[0]


def test_search_rerank_depth_reorders_the_first_hits_by_the_cross_encoder(client, reference):
    asked = {"query": QUERY, "k": 6, "mode": "dense", "include": ["title", "text"]}
    first = client.post("/search", json=asked).json()["results"][0]["hits"]
    texts = [f"{h['title']} {h['text']}".strip() for h in first]
    expected = reference.predict([(QUERY, t) for t in texts])
    order = np.argsort(-expected, kind="stable")[:4]
    body = {"query": QUERY, "k": 4, "mode": "dense", "rerank_depth": 6}
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["rerank_depth"] == 6
    hits = response.json()["results"][0]["hits"]
    assert [h["id"] for h in hits] == [first[i]["id"] for i in order]
    np.testing.assert_allclose([h["rerank_score"] for h in hits], expected[order], atol=2e-6)


def test_search_rerank_depth_without_a_cross_encoder_is_a_400(client_without_reranker):
    response = client_without_reranker.post("/search", json={"query": QUERY, "rerank_depth": 5})
    assert response.status_code == 400
    assert "no re-ranker" in response.json()["error"]["message"]
