"""Every entry point runs the one search: identical rankings (ids and scores) from each.

For every mode and fusion, on an index of passages with deleted documents and a metadata filter,
the hits of `embedkit search --json`, of the server's `/search`, of the search page's own request
(its `searchBody`, run by Node), of the Python API (`SearchIndex.search_text`) and of
`eval retrieval`'s run are the same, to the last bit of each score; and the same holds among them
through the Milvus Lite seam (a pushed collection of whole documents). The reference is each
other: a copy of the search in any one entry point would make it differ.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from serve_helpers import ready  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from embedkit import SearchIndex, build_index, load_encoder  # noqa: E402
from embedkit.cli.app import app  # noqa: E402
from embedkit.evaluation import RetrievalEvaluator  # noqa: E402
from embedkit.index.edits import delete_documents  # noqa: E402
from embedkit.jobs.index_options import IndexOptions  # noqa: E402
from embedkit.serve.app import create_app  # noqa: E402
from embedkit.serve.engine import Engine  # noqa: E402
from embedkit.serve.settings import ServeConfig  # noqa: E402

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in a boundary layer", "noise of a jet", "the"]
GONE = ["d3", "d8", "d21"]
WHERE = "year >= 2005"
K = 100  # eval retrieval's depth: recall@100 and map@100
CASES = [("dense", None), ("lexical", None), ("hybrid", None)] + [
    ("hybrid", fusion) for fusion in ("prf", "zscore", "rrf", "minmax")
]
STATIC = Path(__file__).resolve().parents[2] / "embedkit" / "serve" / "static" / "search.js"


def _records(n: int = 36) -> list[dict]:
    return [
        {
            "_id": f"d{i}",
            "title": TOPICS[i % 6],
            "text": " ".join(f"{TOPICS[(i + j) % 6]} case {i}-{j}." for j in range(1 + i % 5)),
            "year": 2000 + i % 10,
        }
        for i in range(n)
    ]


def _beir(folder: Path, records: list[dict]) -> Path:
    """A BEIR folder of the documents left after the deletions, with the test queries."""
    (folder / "qrels").mkdir(parents=True)
    left = [r for r in records if r["_id"] not in GONE]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in left))
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(QUERIES))
    )
    qrels = "".join(f"q{i}\td{i * 5}\t1\n" for i in range(len(QUERIES)))  # none of them deleted
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return folder


@pytest.fixture(scope="module")
def collection(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("one-search")
    records = _records()
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    passages = folder / "passages"
    build_index(corpus, passages, tiny_onnx, IndexOptions(kind="hnsw", passages="8:2", device="cpu"))
    delete_documents(passages, GONE)
    whole = folder / "whole"
    build_index(corpus, whole, tiny_onnx, IndexOptions(kind="flat", device="cpu"))
    delete_documents(whole, GONE)
    (folder / "queries.txt").write_text("".join(q + "\n" for q in QUERIES))
    return {"passages": passages, "whole": whole, "beir": _beir(folder / "beir", records), "folder": folder}


def ranked(hits) -> list[list[tuple[str, float]]]:
    return [[(h.id, h.score) for h in found] for found in hits]


def from_json(found: list[list[dict]]) -> list[list[tuple[str, float]]]:
    return [[(h["id"], h["score"]) for h in hits] for hits in found]


def settings(mode: str, fusion: str | None, where: str | None) -> dict:
    return {"mode": mode, **({"fusion": fusion} if fusion else {}), **({"where": where} if where else {})}


def cli(index: str, queries: Path, mode: str, fusion: str | None, where: str | None, *more: str) -> list:
    args = ["search", index, "--queries", str(queries), "--json", "-k", str(K), "--mode", mode, *more]
    args += ["--fusion", fusion] if fusion else []
    args += ["--where", where] if where else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return from_json([json.loads(line)["hits"] for line in result.stdout.splitlines()])


def page_bodies(mode: str, fusion: str | None) -> dict:
    """The body the search page posts for this column: its own `searchBody`, run by Node."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("the search page's request is run by Node (Debian: apt-get install nodejs)")
    source = STATIC.read_text()
    start = source.index("  function searchBody(")
    body = source[start : source.index("\n  }\n", start) + 4]
    form = {"query": QUERIES[0], "k": K, "fusion": fusion or "", "alpha": None}  # the form's defaults
    script = f"{body}\nconsole.log(JSON.stringify(searchBody({json.dumps(mode)}, {json.dumps(form)})));"
    return json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)


def served(client: TestClient, body: dict) -> list:
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    return from_json([r["hits"] for r in response.json()["results"]])


@pytest.mark.parametrize("where", [None, WHERE])
def test_every_entry_point_ranks_an_index_of_passages_alike(collection: dict, tiny_onnx: Path, where) -> None:
    index_dir, queries = collection["passages"], collection["folder"] / "queries.txt"
    encoder = load_encoder(tiny_onnx, device="cpu")
    config = ServeConfig(model=str(tiny_onnx), index=str(index_dir), max_wait_ms=0)
    with SearchIndex.load(index_dir) as index, TestClient(create_app(Engine(config))) as client:
        ready(client)
        assert index.passages and len(index.store.masked) > 0  # passages, and deletions still masked
        for mode, fusion in CASES:
            how = settings(mode, fusion, where)
            api = ranked(index.search_text(QUERIES, K, encoder=encoder, **how))
            assert any(api), (mode, fusion)
            assert cli(str(index_dir), queries, mode, fusion, where) == api, (mode, fusion, "cli")
            assert served(client, {"queries": QUERIES, "k": K, **how}) == api, (mode, fusion, "/search")
            if where is None:
                alone = ranked(index.search_text(QUERIES[:1], K, encoder=encoder, **how))  # as the page asks
                assert served(client, page_bodies(mode, fusion)) == alone, (mode, fusion, "page")
                evaluator = RetrievalEvaluator(
                    collection["beir"], index=index, mode=mode, fusion=fusion, alpha=None
                )
                run = evaluator.evaluate(encoder).run
                assert [list(run[f"q{i}"].items()) for i in range(len(QUERIES))] == api, (
                    mode,
                    fusion,
                    "eval",
                )


def test_the_page_sends_the_index_fusion_unless_one_is_chosen(collection: dict, tiny_onnx: Path) -> None:
    """The page's hybrid column is the CLI's default search: no fusion or weight of its own."""
    assert page_bodies("hybrid", None) == {"query": QUERIES[0], "k": K, "mode": "hybrid", "snippets": True}
    assert page_bodies("hybrid", "rrf")["fusion"] == "rrf" and "alpha" not in page_bodies("hybrid", "rrf")


def test_every_entry_point_ranks_a_pushed_collection_alike(collection: dict, tiny_onnx: Path) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from embedkit.remote.base import RemoteTarget
    from embedkit.remote.push import push_index
    from embedkit.remote.search import open_remote

    database = str(collection["folder"] / "milvus.db")
    push_index(collection["whole"], RemoteTarget.parse(database, "docs"))
    queries = collection["folder"] / "queries.txt"
    encoder = load_encoder(tiny_onnx, device="cpu")
    with open_remote(database, "docs") as index:
        for mode, fusion in CASES:
            for where in (None, WHERE):
                how = settings(mode, fusion, where)
                api = ranked(index.search_text(QUERIES, K, encoder=encoder, **how))
                assert any(api), (mode, fusion)
                found = cli(database, queries, mode, fusion, where, "--collection", "docs")
                assert found == api, (mode, fusion, where, "cli")
            evaluator = RetrievalEvaluator(
                collection["beir"], index=index, mode=mode, fusion=fusion, alpha=None
            )
            run = evaluator.evaluate(encoder).run
            api = ranked(index.search_text(QUERIES, K, encoder=encoder, **settings(mode, fusion, None)))
            assert [list(run[f"q{i}"].items()) for i in range(len(QUERIES))] == api, (mode, fusion, "eval")
    config = ServeConfig(model=str(tiny_onnx), index=database, collection="docs", max_wait_ms=0)
    with open_remote(database, "docs") as index, TestClient(create_app(Engine(config))) as client:
        ready(client)
        for mode, fusion in CASES:
            api = ranked(index.search_text(QUERIES, K, encoder=encoder, **settings(mode, fusion, WHERE)))
            assert served(client, {"queries": QUERIES, "k": K, **settings(mode, fusion, WHERE)}) == api


# What a user may ask for, as each entry point takes it; {} asks for nothing (the index's defaults).
ASKED = [
    {},
    {"mode": "dense"},
    {"mode": "lexical"},
    {"fusion": "rrf"},
    {"alpha": 0.4},
    {"mode": "hybrid", "fusion": "zscore", "alpha": 0.3},
]


def cli_flags(asked: dict) -> list[str]:
    return [flag for name, value in asked.items() for flag in (f"--{name}", str(value))]


@pytest.mark.parametrize("asked", ASKED, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "none")
def test_the_same_settings_resolve_one_request_at_every_entry_point(
    collection: dict, tiny_onnx: Path, asked: dict
) -> None:
    """Given the same settings (or none), the CLI, `/search`, the Python API (`SearchIndex` and
    `Collection`) and an evaluation resolve the same request: the user's settings over the index's
    recorded choice over the library's defaults, so `eval retrieval` measures what users search.
    The reference for the resolved values is written out by hand below, from the index's record."""
    from embedkit import open_collection
    from embedkit.search import pipeline
    from embedkit.search.fusion import DEFAULT_ALPHA

    index_dir, queries = collection["passages"], collection["folder"] / "queries.txt"
    encoder = load_encoder(tiny_onnx, device="cpu")
    resolved: dict[str, object] = {}
    real_search = pipeline.search

    def recording(where: str):
        def search(store, texts, model, request, prefixes):
            resolved[where] = (request.mode, request.fusion, request.alpha, request.k, request.depth)
            return real_search(store, texts, model, request, prefixes)

        return search

    config = ServeConfig(model=str(tiny_onnx), index=str(index_dir), max_wait_ms=0)
    mp = pytest.MonkeyPatch()
    try:
        with SearchIndex.load(index_dir) as index, TestClient(create_app(Engine(config))) as client:
            ready(client)
            recorded = index.meta.get("fusion") or {"method": "prf", "alpha": DEFAULT_ALPHA}
            mp.setattr(pipeline, "search", recording("api"))
            api = ranked(index.search_text(QUERIES, K, encoder=encoder, **asked))
            mp.setattr(pipeline, "search", recording("collection"))
            with open_collection(index_dir) as opened:
                found = opened.query(QUERIES, k=K, include=["scores"], **asked)
            assert [[(h["id"], h["score"]) for h in hits] for hits in found] == api
            mp.setattr(pipeline, "search", recording("eval"))
            run = RetrievalEvaluator(collection["beir"], index=index, **asked).evaluate(encoder).run
            assert [list(run[f"q{i}"].items()) for i in range(len(QUERIES))] == api
            mp.setattr(pipeline, "search", recording("served"))
            assert served(client, {"queries": QUERIES, "k": K, **asked}) == api
            mp.setattr(pipeline, "search", recording("cli"))
            args = ["search", str(index_dir), "--queries", str(queries), "--json", "-k", str(K)]
            result = CliRunner().invoke(app, args + cli_flags(asked))
            assert result.exit_code == 0, result.output
            assert from_json([json.loads(line)["hits"] for line in result.stdout.splitlines()]) == api
    finally:
        mp.undo()
    assert set(resolved) == {"api", "collection", "eval", "served", "cli"}
    assert len(set(resolved.values())) == 1, resolved
    # by hand: hybrid unless asked otherwise (the index has a lexical side and no dense choice);
    # a fusion asked for without a weight takes the default weight, else the recorded pair
    mode = asked.get("mode", "hybrid")
    if "fusion" in asked:
        fusion, alpha = asked["fusion"], asked.get("alpha", DEFAULT_ALPHA)
    else:
        fusion, alpha = recorded["method"], asked.get("alpha", recorded["alpha"])
    depth = max(K, 100) if mode == "hybrid" else K
    assert next(iter(resolved.values())) == (mode, fusion, alpha, K, depth)
