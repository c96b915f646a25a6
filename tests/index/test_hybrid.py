"""Hybrid retrieval through the index: BM25 beside FAISS, built, appended and searched together."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, write_jsonl
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.data.corpus import Document
from embedkit.errors import InputError
from embedkit.index.lexical import LexicalIndex
from embedkit.jobs.index_options import IndexOptions
from embedkit.search.fusion import fuse

pytest.importorskip("faiss")

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in the boundary layer", "buckling of a thin shell"]


def _corpus(prefix: str, n: int, seed: int) -> tuple[list[str], list[str], np.random.Generator]:
    rng = np.random.default_rng(seed)
    ids = [f"{prefix}{i}" for i in range(n)]
    texts = [f"{TOPICS[i % 6]} case {prefix}{i} with {TOPICS[(i * 5 + 1) % 6]} measured" for i in range(n)]
    return ids, texts, rng


def _encoder(model: Path, texts: list[str], seed: int = 0) -> TableEncoder:
    rng = np.random.default_rng(seed)
    table = {t: rng.standard_normal(16) for t in [*texts, *QUERIES, "nothing here", "the of and"]}
    return TableEncoder(model, table)


def _reference_lexical(texts: list[str], queries: list[str], k: int) -> list[list[tuple[int, float]]]:
    """BM25 of a fresh in-memory index holding every document at once."""
    index = LexicalIndex.create(None)
    index.add(0, [Document(str(i), t) for i, t in enumerate(texts)])
    index.commit()
    return index.search(queries, k)


def test_append_keeps_dense_and_lexical_in_step(tmp_path: Path, tiny_bert: Path) -> None:
    ids_a, texts_a, _ = _corpus("a", 30, 0)
    ids_b, texts_b, _ = _corpus("b", 12, 1)
    encoder = _encoder(tiny_bert, texts_a + texts_b)
    out = tmp_path / "idx"
    build_index(write_jsonl(tmp_path / "a.jsonl", ids_a, texts_a), out, encoder, IndexOptions(kind="flat"))
    build_index(write_jsonl(tmp_path / "b.jsonl", ids_b, texts_b), out, encoder, IndexOptions(append=True))
    expected = _reference_lexical(texts_a + texts_b, QUERIES + ["b7"], 10)
    with SearchIndex.load(out) as index:
        assert index.meta["lexical"]["k1"] == 1.2 and index.has_lexical
        lexical = index.search_text(QUERIES + ["b7"], k=10, encoder=encoder, mode="lexical")
        dense = index.search_text([texts_b[7]], k=1, encoder=encoder, mode="dense")
    all_ids = ids_a + ids_b
    for hits, reference in zip(lexical, expected, strict=True):  # the statistics cover both parts
        assert [h.id for h in hits] == [all_ids[r] for r, _ in reference]
        assert [h.score for h in hits] == pytest.approx([s for _, s in reference], rel=1e-6)
    assert lexical[-1][0].id == "b7"  # an appended document is found by its words ...
    assert dense[0][0].id == "b7"  # ... and by its vector
    assert dense[0][0].dense_score == pytest.approx(1.0, abs=1e-5) and dense[0][0].lexical_score is None


def test_hybrid_hits_are_the_fusion_of_both_sides(tmp_path: Path, tiny_bert: Path) -> None:
    ids, texts, _ = _corpus("a", 40, 0)
    encoder = _encoder(tiny_bert, texts)
    out = tmp_path / "idx"
    build_index(write_jsonl(tmp_path / "a.jsonl", ids, texts), out, encoder, IndexOptions(kind="flat"))
    with SearchIndex.load(out) as index:
        hybrid = index.search_text(QUERIES, k=5, encoder=encoder, mode="hybrid", fusion="rrf")
        scores, rows = index.store.dense_arrays(encoder.encode(QUERIES, normalize=True), 100, None)
        lexical = index.store.search_lexical(QUERIES, 100, None)
    for q, hits in enumerate(hybrid):
        dense = [(int(r), float(s)) for r, s in zip(rows[q], scores[q], strict=True)]
        expected = fuse(dense, lexical[q], 5, method="rrf")
        assert [(h.row, h.score) for h in hits] == [(f.row, f.score) for f in expected]
        assert [h.id for h in hits] == [ids[f.row] for f in expected]
        assert all(h.dense_score is not None or h.lexical_score is not None for h in hits)


@pytest.mark.parametrize(
    "query",
    ['"shock', "wave*", "-stall", "NEAR(shock wave)", "shock AND", "title:wing", "(heat", "^jet",
     "the of and", "!!! ... ???", "", "ударная волна", "激波", "🙂", "'; DROP TABLE documents; --"],
)  # fmt: skip
def test_any_query_text_returns_hits_and_never_an_sql_error(
    tmp_path: Path, tiny_bert: Path, query: str
) -> None:
    ids, texts, _ = _corpus("a", 12, 0)
    encoder = _encoder(tiny_bert, texts)
    encoder.table.setdefault(query, np.ones(16))
    out = tmp_path / "idx"
    build_index(write_jsonl(tmp_path / "a.jsonl", ids, texts), out, encoder, IndexOptions(kind="flat"))
    with SearchIndex.load(out) as index:
        lexical = index.search_text([query], k=3, encoder=encoder, mode="lexical")[0]
        hybrid = index.search_text([query], k=3, encoder=encoder, mode="hybrid")[0]
        dense = index.search_text([query], k=3, encoder=encoder, mode="dense")[0]
        assert all(h.lexical_score is not None for h in lexical)  # lexical mode: BM25's hits or none
        assert len(hybrid) == 3
        if not lexical:  # no lexical terms, or none found: hybrid is the dense ranking
            assert [(h.id, h.score) for h in hybrid] == [(h.id, h.score) for h in dense]
        assert all(h.dense_score is None and h.lexical_score for h in lexical)  # lexical only, as asked
        if query in ("the of and", "!!! ... ???", "", "🙂"):  # no terms: no hits, never dense ones
            assert lexical == []


def test_an_index_without_a_lexical_side_searches_dense_and_names_the_fix(
    tmp_path: Path, tiny_bert: Path
) -> None:
    ids, texts, _ = _corpus("a", 10, 0)
    encoder = _encoder(tiny_bert, texts)
    out = tmp_path / "idx"
    build_index(
        write_jsonl(tmp_path / "a.jsonl", ids, texts), out, encoder, IndexOptions(kind="flat", lexical=False)
    )
    with SearchIndex.load(out) as index:
        assert index.meta["lexical"] is None and index.request().mode == "dense"
        assert len(index.search_text(QUERIES[:1], k=3, encoder=encoder)[0]) == 3
        with pytest.raises(InputError, match="has no lexical side.*--mode dense.*--reindex-lexical"):
            index.search_text(QUERIES[:1], k=3, encoder=encoder, mode="hybrid")
    # an append keeps the index as it is: still dense only
    more_ids, more_texts, _ = _corpus("b", 3, 1)
    encoder = _encoder(tiny_bert, texts + more_texts)
    build_index(
        write_jsonl(tmp_path / "b.jsonl", more_ids, more_texts), out, encoder, IndexOptions(append=True)
    )
    with SearchIndex.load(out) as index:
        assert not index.has_lexical and len(index.rows) == 13


def test_cli_lexical_mode_on_a_dense_only_index_exits_2(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = tmp_path / "docs.txt"
    corpus.write_text("shock waves on a wing\nheat transfer in a layer\njet noise\n")
    runner = CliRunner()
    out = str(tmp_path / "idx")
    model = ["--model", str(tiny_bert)]
    built = runner.invoke(app, ["index", str(corpus), "--out", out, *model, "--no-lexical"])
    assert built.exit_code == 0, built.output
    result = runner.invoke(app, ["search", out, "shock", "--mode", "lexical", "--device", "cpu"])
    assert result.exit_code == 2
    assert "has no lexical side" in result.stderr and "--mode dense" in result.stderr
    hybrid_index = str(tmp_path / "idx2")
    assert runner.invoke(app, ["index", str(corpus), "--out", hybrid_index, *model]).exit_code == 0
    query = ["search", hybrid_index, "heat transfer", "-k", "2", "--json", "--device", "cpu"]
    result = runner.invoke(app, query)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert hits[0]["id"] == "2" and hits[0]["lexical_score"] > 0 and hits[0]["dense_score"] is not None


def test_a_killed_append_leaves_both_sides_as_they_were(tmp_path: Path, tiny_bert: Path) -> None:
    from test_hardening import base_index, run_worker

    out = base_index(tmp_path, tiny_bert, n=20)
    with SearchIndex.load(out) as index:
        before = index.store.search_lexical(["a3", "b3", "text"], 10, None)
    job = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 10, "seed": 1}
    assert run_worker(job, env={"EMBEDKIT_FAULT_AT": "version-staged"}) == -9
    with SearchIndex.load(out) as index:
        assert index.store.search_lexical(["a3", "b3", "text"], 10, None) == before
        assert before[1] == []  # the killed run's documents are in neither side
        assert len(index.rows) == 20


def test_eval_retrieval_all_modes_agree_with_and_without_an_index(tmp_path: Path, tiny_bert: Path) -> None:
    from eval_data import write_beir

    folder = write_beir(tmp_path / "beir")
    runner = CliRunner()
    index = tmp_path / "idx"
    built = runner.invoke(app, ["index", str(folder), "--out", str(index), "--model", str(tiny_bert)])
    assert built.exit_code == 0, built.output
    exact, indexed = tmp_path / "exact.json", tmp_path / "indexed.json"
    common = ["--mode", "all", "--device", "cpu"]
    result = runner.invoke(
        app, ["eval", "retrieval", str(folder), "--model", str(tiny_bert), *common, "--json", str(exact)]
    )
    assert result.exit_code == 0, result.output
    assert "dense" in result.stdout and "lexical" in result.stdout and "hybrid" in result.stdout
    result = runner.invoke(
        app, ["eval", "retrieval", str(folder), "--index", str(index), *common, "--json", str(indexed)]
    )
    assert result.exit_code == 0, result.output
    first, second = json.loads(exact.read_text()), json.loads(indexed.read_text())
    assert set(first["metrics"]) == {"dense", "lexical", "hybrid"}
    # the in-memory BM25 of the folder and the index's own BM25 are the same index
    assert first["metrics"]["lexical"] == second["metrics"]["lexical"]


def test_default_hybrid_is_dense_search_with_the_feedback_query(tmp_path: Path, tiny_bert: Path) -> None:
    """prf by hand: exact cosine and an in-memory BM25, z-score 0.7 picks 3 documents, Rocchio 0.5."""
    ids, texts, _ = _corpus("a", 40, 0)
    encoder = _encoder(tiny_bert, texts)
    out = tmp_path / "idx"
    build_index(write_jsonl(tmp_path / "a.jsonl", ids, texts), out, encoder, IndexOptions(kind="flat"))
    docs = np.stack([encoder.table[t] for t in texts])
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    lexical = _reference_lexical(texts, QUERIES, 100)
    with SearchIndex.load(out) as index:
        got = index.search_text(QUERIES, k=5, encoder=encoder)  # hybrid, prf: the defaults
    for query, hits, bm25 in zip(QUERIES, got, lexical, strict=True):
        q = encoder.table[query] / np.linalg.norm(encoder.table[query])
        cosines = docs @ q
        dense = sorted(((r, float(c)) for r, c in enumerate(cosines)), key=lambda h: -h[1])
        first = [f.row for f in fuse(dense, bm25, 3, "zscore", alpha=0.7)]
        moved = q + 0.5 * docs[first].mean(axis=0)
        moved /= np.linalg.norm(moved)
        final = np.argsort(-(docs @ moved))[:5]
        assert [h.id for h in hits] == [ids[r] for r in final]
        assert [h.score for h in hits] == pytest.approx([float(docs[r] @ moved) for r in final], abs=1e-5)
        assert all(h.dense_score == pytest.approx(float(cosines[h.row]), abs=1e-5) for h in hits)


def _three_document_index(tmp_path: Path, tiny_bert: Path) -> Path:
    """`embedkit index` of three short documents (ids 1-3), as a user runs it."""
    corpus = tmp_path / "docs.txt"
    corpus.write_text("shock waves on a wing\nheat transfer in a layer\njet noise\n")
    out = tmp_path / "idx"
    built = CliRunner().invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    assert built.exit_code == 0, built.output
    return out


def test_a_legacy_lexical_side_is_refused_with_the_fix_and_reindexed(tmp_path: Path, tiny_bert: Path) -> None:
    """An index whose BM25 postings an earlier embedkit kept in SQLite: dense works, the rest names
    `--reindex-lexical`, which rebuilds the side from the stored documents (no model needed)."""
    import sqlite3

    from embedkit.index.folder import index_files_dir
    from embedkit.storage.atomic import write_json_atomic
    from embedkit.storage.versioned import write_checksums

    out, runner = _three_document_index(tmp_path, tiny_bert), CliRunner()
    live = index_files_dir(out)  # make it look like an earlier embedkit's index
    shutil.rmtree(live / "lexical")
    db = sqlite3.connect(live / "docs.sqlite")
    db.execute("CREATE TABLE lexical_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    db.close()
    meta = json.loads((live / "embedkit-index.json").read_text())
    meta["lexical"] = {
        "stopwords": "lucene-english",
        "stemmer": "english",
        "k1": 1.2,
        "b": 0.75,
        "version": 1,
    }
    write_json_atomic(live / "embedkit-index.json", meta)
    write_checksums(live)
    dense = runner.invoke(app, ["search", str(out), "heat", "--mode", "dense", "--device", "cpu"])
    assert dense.exit_code == 0, dense.output
    assert runner.invoke(app, ["search", str(out), "heat", "--device", "cpu"]).exit_code == 0  # dense
    hybrid = runner.invoke(app, ["search", str(out), "heat", "--mode", "hybrid", "--device", "cpu"])
    assert (
        hybrid.exit_code == 2 and "--reindex-lexical" in hybrid.stderr and "earlier embedkit" in hybrid.stderr
    )
    fixed = runner.invoke(app, ["index", "--out", str(out), "--reindex-lexical"])
    assert fixed.exit_code == 0, fixed.output
    result = runner.invoke(
        app, ["search", str(out), "heat transfer", "--mode", "lexical", "--json", "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["hits"][0]["id"] == "2"
    db = sqlite3.connect(index_files_dir(out) / "docs.sqlite")
    assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'lexical_%'").fetchone()[0] == 0


def test_a_changed_lexical_file_is_refused_with_exit_2(tmp_path: Path, tiny_bert: Path) -> None:
    from embedkit.index.folder import index_files_dir

    out, runner = _three_document_index(tmp_path, tiny_bert), CliRunner()
    target = max((index_files_dir(out) / "lexical").glob("*.idx"), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other content
    target.write_bytes(bytes(data))
    result = runner.invoke(app, ["search", str(out), "heat", "--device", "cpu"])
    assert result.exit_code == 2 and "lexical/" in result.stderr and "checksum" in result.stderr
