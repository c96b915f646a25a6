"""`embedkit push` and search against Milvus Lite: the same rankings as the local index, each row once.

References: the dense top-10 of a pushed flat index must be the local flat index's (and an exact
numpy search's), documents and metadata must come back as given, pushes killed half way and
pushed again must leave each row once. Skipped without pymilvus / milvus-lite (`embedkit[milvus]`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.errors import InputError, RunFailure
from embedkit.jobs.index_options import IndexOptions
from embedkit.remote.base import RemoteTarget
from embedkit.remote.milvus import MilvusCollection
from embedkit.remote.push import push_index
from embedkit.remote.search import open_pushed

pytest.importorskip("faiss")
pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in the boundary layer", "buckling of a thin shell"]
DIM = 32  # the tiny BERT fixture's dimension, so the CLI can embed queries with it


def _documents(n: int) -> tuple[list[str], list[str]]:
    ids = [f"d{i}" for i in range(n)]
    texts = [f"{TOPICS[i % 6]} case {i} with {TOPICS[(i * 5 + 1) % 6]} measured" for i in range(n)]
    return ids, texts


def _write_corpus(path: Path, ids: list[str], texts: list[str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i, (doc_id, text) in enumerate(zip(ids, texts, strict=True)):
            f.write(json.dumps({"_id": doc_id, "title": f"title {i % 4}", "text": text, "lab": i % 3}) + "\n")
    return path


@pytest.fixture
def small(tmp_path: Path, tiny_bert: Path) -> tuple[Path, TableEncoder, list[str]]:
    """A 60-document flat index whose vectors the test chose, and its encoder."""
    ids, texts = _documents(60)
    rng = np.random.default_rng(0)
    full = [f"title {i % 4} {t}" for i, t in enumerate(texts)]
    table = {t: rng.standard_normal(DIM) for t in [*full, *QUERIES]}
    encoder = TableEncoder(tiny_bert, table)
    out = tmp_path / "idx"
    build_index(_write_corpus(tmp_path / "c.jsonl", ids, texts), out, encoder, IndexOptions(kind="flat"))
    return out, encoder, full


def _target(tmp_path: Path, name: str = "docs") -> RemoteTarget:
    return RemoteTarget.parse(str(tmp_path / "milvus.db"), name)


def test_pushed_index_gives_the_local_dense_top10_and_documents(tmp_path: Path, small) -> None:
    out, encoder, full = small
    target = _target(tmp_path)
    report = push_index(out, target, batch_size=16)  # 4 batches
    assert (report.total, report.sent) == (60, 60)
    vectors = encoder.encode(full, normalize=True)
    queries = encoder.encode(QUERIES, normalize=True)
    _, exact = brute_force(vectors, queries, 10)
    with SearchIndex.load(out) as local, open_pushed(target) as remote:
        assert len(remote.rows) == 60 and remote.dim == DIM
        here = local.search_text(QUERIES, k=10, encoder=encoder, mode="dense")
        there = remote.search_text(QUERIES, k=10, encoder=encoder, mode="dense")
        for q, (a, b) in enumerate(zip(here, there, strict=True)):
            assert [h.id for h in b] == [h.id for h in a] == [f"d{r}" for r in exact[q]]
            np.testing.assert_allclose([h.score for h in b], [h.score for h in a], atol=1e-5)
            assert [h.document for h in b] == [h.document for h in a]  # title, text, metadata back
        assert there[0][0].document.metadata == {"lab": int(there[0][0].id[1:]) % 3}
        np.testing.assert_allclose(remote.rows.vectors([5, 0]), vectors[[5, 0]], atol=1e-6)


def test_killed_then_repeated_pushes_leave_each_row_once(tmp_path: Path, small, monkeypatch) -> None:
    out, encoder, _ = small
    target = _target(tmp_path)
    real = MilvusCollection.upsert
    calls = []

    def dies_after_two(self, rows, documents, vectors):
        calls.append(list(rows))
        if len(calls) > 2:
            raise RunFailure("killed")
        real(self, rows, documents, vectors)

    monkeypatch.setattr(MilvusCollection, "upsert", dies_after_two)
    with pytest.raises(RunFailure, match="killed"):
        push_index(out, target, batch_size=20)
    monkeypatch.setattr(MilvusCollection, "upsert", real)
    with pytest.raises(InputError):  # the record says 0 rows complete; a search still opens
        open_pushed(RemoteTarget.parse(target.uri, "other"))
    resumed = push_index(out, target, append=True, batch_size=20)
    assert resumed.sent == 20  # rows 40..59 only
    again = push_index(out, target, batch_size=20)  # a plain push again: upserts, no copies
    assert again.sent == 60
    collection = MilvusCollection.connect(target)
    try:
        assert collection.count() == 60
        assert collection.rows_present(0, 100) == set(range(60))
        assert collection.read_record().count == 60
    finally:
        collection.close()


def test_other_model_other_dim_and_bad_names_are_refused(tmp_path: Path, small) -> None:
    out, encoder, _ = small
    target = _target(tmp_path)
    push_index(out, target)
    collection = MilvusCollection.connect(target)
    try:
        record = collection.read_record()
        assert (record.model_fingerprint, record.dim, record.count) == (encoder.fingerprint, DIM, 60)
        # the collection as another model's push would leave it
        collection.write_record(replace(record, model_fingerprint="0123456789abcdef", model="other-model"))
        eight = MilvusCollection(RemoteTarget.parse(target.uri, "eight"), collection.client)
        eight.create(8, replace(record, dim=8, count=0))  # a collection of 8-d vectors
    finally:
        collection.close()
    runner = CliRunner()
    result = runner.invoke(app, ["push", str(out), target.uri, "--collection", "docs"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and "other-model" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["push", str(out), target.uri, "--collection", "eight", "--append"])
    assert result.exit_code == 2 and "8-d" in result.output and result.output.startswith("error:")
    for bad in ("9lives", "has-dash", "a b"):
        result = runner.invoke(app, ["push", str(out), target.uri, "--collection", bad])
        assert result.exit_code == 2 and "bad collection name" in result.output
    result = runner.invoke(app, ["push", str(out), "http://host:1"])
    assert result.exit_code == 2 and "bad search server URI" in result.output
    # nothing was written by the refused pushes
    collection = MilvusCollection.connect(target)
    eight = MilvusCollection(RemoteTarget.parse(target.uri, "eight"), collection.client)
    try:
        assert collection.count() == 60 and eight.count() == 0
        assert collection.read_record().model == "other-model"
    finally:
        collection.close()


def test_unreachable_server_is_one_error_line(tmp_path: Path, small) -> None:
    out, _, _ = small
    result = CliRunner().invoke(app, ["push", str(out), "milvus://127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error:") and "connecting" in result.output
    assert "is the server up" in result.output and "refused the token" not in result.output
    assert "Traceback" not in result.output


def test_the_cli_starts_without_pymilvus() -> None:
    import subprocess
    import sys

    code = (
        "import sys, embedkit.cli.app\n"
        "print('pymilvus' in sys.modules, 'embedkit.remote.milvus' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_cli_push_then_search_prints_what_the_local_index_prints(tmp_path: Path, small) -> None:
    out, _, _ = small
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    result = runner.invoke(app, ["push", str(out), db, "--collection", "docs"])
    assert result.exit_code == 0, result.output
    assert "pushed 60 of 60 documents" in result.output
    queries = tmp_path / "q.txt"
    queries.write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    # queries embedded by the model the push recorded (the tiny BERT folder), on both sides
    every = ["--include", "title,text,metadata,snippet,scores"]
    asked = ["--queries", str(queries), "--json", "--mode", "dense", *every]
    local = runner.invoke(app, ["search", str(out), *asked])
    remote = runner.invoke(
        app, ["search", db, "-c", "docs", *asked]
    )
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    here, there = _json_lines(local.output), _json_lines(remote.output)
    assert len(here) == len(there) == 3
    for a, b in zip(here, there, strict=True):
        assert [h["id"] for h in b["hits"]] == [h["id"] for h in a["hits"]]
        np.testing.assert_allclose(
            [h["score"] for h in b["hits"]], [h["score"] for h in a["hits"]], atol=1e-5
        )
        for h in (*a["hits"], *b["hits"]):
            h.pop("score"), h.pop("dense_score")
        # the same snippet on both sides, made here (`embedkit.search.snippets`): each text is one
        # sentence, shown whole, the query's words (less the stopwords "on", "a", "in", "the",
        # "of") in <b>
        words = set(a["query"].split()) - {"on", "a", "in", "the", "of"}
        for h in (*a["hits"], *b["hits"]):
            assert h.pop("snippet") == " ".join(f"<b>{w}</b>" if w in words else w for w in h["text"].split())
        assert a == b  # rank, id, title, metadata, null lexical score: the same JSON
    missing = runner.invoke(app, ["search", db, "-c", "nothing_here", "shock"])
    assert (
        missing.exit_code == 2
        and missing.output.startswith("error:")
        and "no such collection" in missing.output
    )


def _metrics(output: str) -> dict[str, list[str]]:
    """metric -> the table's values, from `eval retrieval`'s printed table."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│") if c.strip()]
        if cells and (cells[0].startswith(("ndcg", "mrr", "recall", "map"))):
            rows[cells[0]] = cells[1:]
    return rows


def test_eval_retrieval_on_a_pushed_index_gives_the_local_figures(tmp_path: Path, tiny_bert: Path) -> None:
    from eval_data import write_beir

    folder = write_beir(tmp_path / "beir")
    build_index(folder, tmp_path / "index", tiny_bert, IndexOptions(kind="flat", device="cpu"))
    db = str(tmp_path / "e.db")
    runner = CliRunner()
    assert runner.invoke(app, ["push", str(tmp_path / "index"), db, "-c", "beir"]).exit_code == 0
    args = ["eval", "retrieval", str(folder), "--mode", "all", "--fusion", "rrf"]
    local = runner.invoke(app, [*args, "--index", str(tmp_path / "index")])
    remote = runner.invoke(app, [*args, "--index", db, "--collection", "beir"])
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    here, there = _metrics(local.output), _metrics(remote.output)
    assert len(here) == 6 and len(here["ndcg@10"]) == 3  # dense, lexical, hybrid
    for name, values in here.items():  # dense is exact; BM25 ranks alike on these 12 short texts
        assert there[name][0] == values[0], name
        assert [float(v) for v in there[name]] == pytest.approx([float(v) for v in values], abs=0.02), name
    assert f"{db} collection beir search" in " ".join(remote.output.split())
    wrong = runner.invoke(app, [*args, "--index", db, "--collection", "absent_one"])
    assert wrong.exit_code == 2 and wrong.output.startswith("error:")


def test_part_files_push_straight_to_milvus(tmp_path: Path, tiny_bert: Path) -> None:
    from runtime_helpers import clustered, write_jsonl

    from embedkit.jobs.parts import Shard
    from embedkit.jobs.sharding import embed_shard
    from embedkit.remote.push import push_vectors

    vectors = clustered(90, DIM, 6, seed=3)
    ids = [f"p{i}" for i in range(90)]
    texts = [f"text of {doc_id}" for doc_id in ids]
    corpus = write_jsonl(tmp_path / "c.jsonl", ids, texts)
    encoder = TableEncoder(tiny_bert, dict(zip(texts, vectors, strict=True)))
    for i in range(3):
        embed_shard(corpus, tmp_path / "parts", Shard(i, 3), encoder)
    db = str(tmp_path / "p.db")
    result = CliRunner().invoke(
        app, ["push", "--from-vectors", str(tmp_path / "parts"), "--corpus", str(corpus), db]
    )
    assert result.exit_code == 0, result.output
    target = RemoteTarget.parse(db)
    again = push_vectors(tmp_path / "parts", corpus, target, append=True, batch_size=7)
    assert (again.total, again.sent) == (90, 0)  # all there: nothing sent
    _, exact = brute_force(vectors, vectors[:5], 10)
    with open_pushed(target) as remote:
        assert len(remote.rows) == 90 and remote.meta["model_fingerprint"] == encoder.fingerprint
        _, found = remote.search(vectors[:5], k=10)
        assert found == [[ids[r] for r in row] for row in exact]
        assert remote.rows.documents([89])[0].text == "text of p89"
    hnsw = RemoteTarget.parse(db, "graph")
    push_vectors(tmp_path / "parts", corpus, hnsw, dense_index="HNSW")
    with open_pushed(hnsw) as remote:  # 90 vectors: HNSW at ef 128 finds the exact top-10
        assert remote.search(vectors[:5], k=10)[1] == [[ids[r] for r in row] for row in exact]
    wrong = CliRunner().invoke(app, ["push", "--from-vectors", str(tmp_path / "parts"), db])
    assert wrong.exit_code == 2 and "--corpus" in wrong.output


def test_a_smaller_source_is_not_pushed_over_a_larger_collection(
    tmp_path: Path, small, tiny_bert: Path
) -> None:
    out, encoder, _ = small
    target = _target(tmp_path)
    push_index(out, target)
    ids, texts = _documents(10)
    fewer = tmp_path / "fewer"
    full = [f"title {i % 4} {t}" for i, t in enumerate(texts)]
    build_index(
        _write_corpus(tmp_path / "f.jsonl", ids, texts),
        fewer,
        TableEncoder(tiny_bert, {t: encoder.table[t] for t in full}),
        IndexOptions(kind="flat"),
    )
    with pytest.raises(InputError, match="holds rows this source never had"):
        push_index(fewer, target)


def test_a_pushed_index_searches_with_its_recorded_fusion_by_default(tmp_path: Path, tiny_bert: Path) -> None:
    """The collection's default search is the index's: the recorded (non-default) fusion, the
    same ranking; an explicit --fusion overrides it on both."""
    from eval_data import QUERIES as BEIR_QUERIES
    from eval_data import write_beir

    from embedkit.search.fusion import DEFAULT_FUSION
    from embedkit.search.request import Calibration

    chosen = Calibration("rrf", 0.5, "recorded for this test")
    assert chosen.method != DEFAULT_FUSION  # else the default would pass for the recorded choice
    folder = write_beir(tmp_path / "beir")
    out = tmp_path / "index"
    build_index(folder / "corpus.jsonl", out, tiny_bert, IndexOptions(kind="flat"), fusion=chosen)
    db = str(tmp_path / "f.db")
    runner = CliRunner()
    pushed = runner.invoke(app, ["push", str(out), db, "-c", "beir"])
    assert pushed.exit_code == 0, pushed.output
    queries = tmp_path / "q.txt"
    queries.write_text("\n".join(BEIR_QUERIES.values()) + "\n", encoding="utf-8")
    for extra, fusion in (([], "rrf"), (["--fusion", "zscore", "--alpha", "0.3"], "zscore")):
        local = runner.invoke(app, ["search", str(out), "--queries", str(queries), "--json", *extra])
        remote = runner.invoke(app, ["search", db, "-c", "beir", "--queries", str(queries), "--json", *extra])
        assert local.exit_code == 0 and remote.exit_code == 0, remote.output
        here, there = _json_lines(local.output), _json_lines(remote.output)
        assert len(here) == len(there) == len(BEIR_QUERIES)
        for a, b in zip(here, there, strict=True):
            assert (b["mode"], b["fusion"]) == (a["mode"], a["fusion"]) == ("hybrid", fusion)
            assert b["alpha"] == a["alpha"]
            if fusion == "rrf":  # ranks only: the same whatever the two BM25s' scales
                assert [h["id"] for h in b["hits"]] == [h["id"] for h in a["hits"]]
    with SearchIndex.load(out) as index, open_pushed(RemoteTarget.parse(db, "beir")) as collection:
        texts = list(BEIR_QUERIES.values())
        encoder = index.encoder()
        recorded = [(opened.request().fusion, opened.request().alpha) for opened in (collection, index)]
        assert recorded == [("rrf", 0.5)] * 2
        local_hits = index.search_text(texts, k=5, encoder=encoder)
        remote_hits = collection.search_text(texts, k=5, encoder=encoder)
        assert [[h.id for h in q] for q in remote_hits] == [[h.id for h in q] for q in local_hits]


def test_a_pushed_index_of_fewer_dimensions_cuts_its_queries_as_the_index_does(
    tmp_path: Path, tiny_bert: Path
) -> None:
    """An `index --dim 16` index of the 32-d tiny BERT, pushed: the collection records the model's
    size and cuts each query to its first 16 dimensions, renormalized, so its dense hits are the
    local index's and exact search's over the cut vectors (numpy, by hand)."""
    from eval_data import QUERIES as BEIR_QUERIES
    from eval_data import write_beir

    from embedkit.encode.torch_backend import TorchEncoder

    folder = write_beir(tmp_path / "beir")
    out = tmp_path / "index"
    build_index(folder / "corpus.jsonl", out, tiny_bert, IndexOptions(kind="flat", dim=16))
    db = str(tmp_path / "d.db")
    pushed = CliRunner().invoke(app, ["push", str(out), db, "-c", "cut"])
    assert pushed.exit_code == 0, pushed.output
    texts = list(BEIR_QUERIES.values())
    with SearchIndex.load(out) as index, open_pushed(RemoteTarget.parse(db, "cut")) as collection:
        assert (collection.dim, collection.meta["model_dim"]) == (16, DIM)
        local = index.search_text(texts, k=4, mode="dense")
        remote = collection.search_text(texts, k=4, mode="dense")
        stored = index.store.vectors_of_rows(list(range(len(index.rows))))
        row_ids = [doc.id for doc in index.store.docs.by_rows(list(range(len(index.rows))))]
    full = TorchEncoder(tiny_bert, device="cpu").encode(texts, normalize=True)
    cut = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    scores, rows = brute_force(stored, cut, 4)
    assert [[h.id for h in q] for q in remote] == [[h.id for h in q] for q in local]
    assert [[h.id for h in q] for q in remote] == [[row_ids[r] for r in q] for q in rows]
    np.testing.assert_allclose([[h.score for h in q] for q in remote], scores, atol=1e-4)


def test_a_pushed_quantized_index_holds_its_float_vectors(tmp_path: Path, tiny_bert: Path) -> None:
    """A binary index pushed: the collection gets the float vectors of `vectors.npy` (not decoded
    signs), so its exact dense search equals exact search over them (numpy, by hand)."""
    from eval_data import QUERIES as BEIR_QUERIES
    from eval_data import write_beir

    folder = write_beir(tmp_path / "beir")
    out = tmp_path / "index"
    build_index(folder / "corpus.jsonl", out, tiny_bert, IndexOptions(kind="flat", quantize="binary"))
    db = str(tmp_path / "q.db")
    pushed = CliRunner().invoke(app, ["push", str(out), db, "-c", "binary"])
    assert pushed.exit_code == 0, pushed.output
    texts = list(BEIR_QUERIES.values())
    full = np.load(next(out.glob("**/vectors.npy")))
    with SearchIndex.load(out) as index, open_pushed(RemoteTarget.parse(db, "binary")) as collection:
        row_ids = [doc.id for doc in index.store.docs.by_rows(list(range(len(index.rows))))]
        queries = index.encoder().encode(texts, normalize=True)
        remote = collection.search_text(texts, k=4, mode="dense", encoder=index.encoder())
    scores, rows = brute_force(full, queries, 4)
    assert [[h.id for h in q] for q in remote] == [[row_ids[r] for r in q] for q in rows]
    np.testing.assert_allclose([[h.score for h in q] for q in remote], scores, atol=1e-4)
