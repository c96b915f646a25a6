"""`/search` end to end in-process over a real index: the mode it really used, fusion, snippets,
the index version it answered from, and a server that follows appends and survives `clean`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from serve_helpers import ready  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from embedkit.jobs.index_options import IndexOptions
from embedkit.serve.app import create_app  # noqa: E402
from embedkit.serve.engine import Engine  # noqa: E402
from embedkit.serve.settings import ServeConfig  # noqa: E402


@pytest.fixture
def index_copy(tiny_index: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "index"
    shutil.copytree(tiny_index, copy)
    return copy


def app_over(index: Path, model: Path) -> TestClient:
    return TestClient(create_app(Engine(ServeConfig(model=str(model), index=str(index), max_wait_ms=0))))


def test_search_reports_the_mode_it_used_and_ranks_as_the_library(index_copy: Path, tiny_onnx: Path) -> None:
    from embedkit import SearchIndex, load_encoder

    query = "shock wave on a wing"
    with SearchIndex.load(index_copy) as index:
        encoder = load_encoder(tiny_onnx, device="cpu")
        assert index.request().mode == "hybrid"
        expected = {
            mode: [h.id for h in index.search_text([query], 5, encoder=encoder, mode=mode)[0]]
            for mode in ("dense", "hybrid")
        }
        zscore = [h.id for h in index.search_text([query], 5, encoder=encoder, fusion="zscore", alpha=0.5)[0]]
    with app_over(index_copy, tiny_onnx) as client:
        ready(client)
        default = client.post("/search", json={"query": query, "k": 5}).json()
        assert (default["mode"], default["fusion"], default["alpha"]) == ("hybrid", "prf", 0.7)
        assert default["index_version"] == "v-000001"
        assert [h["id"] for h in default["results"][0]["hits"]] == expected["hybrid"]

        dense = client.post("/search", json={"query": query, "k": 5, "mode": "dense"}).json()
        assert dense["mode"] == "dense" and "fusion" not in dense
        assert [h["id"] for h in dense["results"][0]["hits"]] == expected["dense"]

        fused = client.post("/search", json={"query": query, "k": 5, "fusion": "zscore", "alpha": 0.5}).json()
        assert (fused["fusion"], fused["alpha"]) == ("zscore", 0.5)
        assert [h["id"] for h in fused["results"][0]["hits"]] == zscore

        with_snippets = client.post(
            "/search", json={"query": query, "mode": "lexical", "snippets": True}
        ).json()
        hits = with_snippets["results"][0]["hits"]
        assert hits and all("<b>" in h["snippet"] for h in hits)

        for bad in ({"fusion": "mean"}, {"alpha": 1.5}, {"snippets": "yes"}):
            response = client.post("/search", json={"query": query, **bad})
            assert response.status_code == 422 and response.json()["error"]["param"] == next(iter(bad))


def test_the_server_follows_appends_and_outlives_the_old_version(
    index_copy: Path, tiny_onnx: Path, tmp_path: Path
) -> None:
    from embedkit import build_index
    from embedkit.storage.versioned import clean

    new_doc = {"_id": "z9", "title": "zebra", "text": "zebra zebra stripes on the savanna"}
    with app_over(index_copy, tiny_onnx) as client:
        ready(client)
        before = client.post("/search", json={"query": "zebra stripes", "mode": "lexical"}).json()
        assert before["results"][0]["hits"] == [] and before["index_version"] == "v-000001"

        extra = tmp_path / "more.jsonl"
        extra.write_text(json.dumps(new_doc) + "\n", encoding="utf-8")
        build_index(extra, index_copy, options=IndexOptions(append=True, device="cpu"))

        after = client.post("/search", json={"query": "zebra stripes", "mode": "lexical"}).json()
        assert [h["id"] for h in after["results"][0]["hits"]] == ["z9"]
        assert after["index_version"] == "v-000002"
        assert client.get("/health").json()["index_version"] == "v-000002"

        # A second append (which, as `clean` would, deletes all but the live version and the one
        # before it): the version the server started on is gone, and it does not need it.
        extra.write_text(json.dumps({**new_doc, "_id": "z10"}) + "\n", encoding="utf-8")
        build_index(extra, index_copy, options=IndexOptions(append=True, device="cpu"))
        clean(index_copy)
        assert not (index_copy / "v-000001").exists()
        again = client.post("/search", json={"query": "zebra stripes", "mode": "lexical"}).json()
        assert {h["id"] for h in again["results"][0]["hits"]} == {"z9", "z10"}
        assert again["index_version"] == "v-000003"
        assert "embedkit_index_swaps_total 2" in client.get("/metrics").text


def test_a_version_built_with_another_model_is_not_swapped_in(
    index_copy: Path, tiny_onnx: Path, tiny_bert_no_types: Path, tmp_path: Path
) -> None:
    from embedkit import build_index

    with app_over(index_copy, tiny_onnx) as client:
        ready(client)
        corpus = tmp_path / "c.jsonl"
        corpus.write_text(json.dumps({"_id": "q1", "text": "another model"}) + "\n", encoding="utf-8")
        build_index(
            corpus, index_copy, model=tiny_bert_no_types, options=IndexOptions(overwrite=True, device="cpu")
        )
        answer = client.post("/search", json={"query": "wing", "mode": "dense"})
        assert answer.status_code == 200 and answer.json()["index_version"] == "v-000001"


def test_serve_searches_a_collection_pushed_to_milvus(
    tiny_index: Path, tiny_onnx: Path, tmp_path: Path
) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from embedkit import SearchIndex, load_encoder
    from embedkit.remote.base import RemoteTarget
    from embedkit.remote.push import push_index

    db = str(tmp_path / "search.db")
    push_index(tiny_index, RemoteTarget.parse(db, "docs"))
    query = "heat transfer at high speed"
    with SearchIndex.load(tiny_index) as index:
        encoder = load_encoder(tiny_onnx, device="cpu")
        local = {
            m: [h.id for h in index.search_text([query], 5, encoder=encoder, mode=m)[0]] for m in ("dense",)
        }
    config = ServeConfig(model=str(tiny_onnx), index=db, collection="docs", max_wait_ms=0)
    with TestClient(create_app(Engine(config))) as client:
        ready(client)
        answer = client.post("/search", json={"query": query, "k": 5, "mode": "dense"}).json()
        assert [h["id"] for h in answer["results"][0]["hits"]] == local["dense"]
        assert answer["index_version"] is None  # a collection has no versions
        default = client.post("/search", json={"query": query, "k": 5}).json()
        assert default["mode"] == "hybrid" and len(default["results"][0]["hits"]) == 5


def test_search_of_an_index_of_passages_with_a_query_prefix(tiny_onnx: Path, tmp_path: Path) -> None:
    """The server ranks as the library does (which embeds the recorded query prefix) and returns passages."""
    from embedkit import SearchIndex, build_index, load_encoder

    corpus = tmp_path / "corpus.jsonl"
    texts = [
        " ".join(["flow air pressure"] * 10) + " shock wave",
        "the cat eats food",
        "heat transfer at mach five",
    ]
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    build_index(
        corpus,
        tmp_path / "index",
        model=tiny_onnx,
        options=IndexOptions(device="cpu", passages="8:2", query_prefix="q: "),
    )
    query = "shock wave"
    with SearchIndex.load(tmp_path / "index") as index:
        encoder = load_encoder(tiny_onnx, device="cpu")
        expected = index.search_text([query], 3, encoder=encoder, passages=True)[0]
    with app_over(tmp_path / "index", tiny_onnx) as client:
        ready(client)
        hits = client.post("/search", json={"query": query, "k": 3, "passages": True}).json()["results"][0][
            "hits"
        ]
    assert [(h["id"], h["passage"]["text"]) for h in hits] == [(h.id, h.passage.text) for h in expected]
    assert [h["score"] for h in hits] == pytest.approx([h.score for h in expected], abs=1e-5)
