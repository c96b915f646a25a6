"""Delete, upsert and compact: each a new version whose search answers are a rebuilt index's.

References: dense results against an exact numpy search over the documents that remain (and an
index rebuilt from them); lexical results against the index before the deletion restricted to the
rows that remain (tantivy keeps deleted documents in its statistics until compaction) and, after
`compact`, against a fresh lexical index of the remaining documents; the corpus fingerprint against
a fresh build's. A kill at each step of a deletion leaves the old or the new version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.data.corpus import Document
from embedkit.errors import InputError
from embedkit.index.edits import compact_index, delete_documents
from embedkit.index.lexical import LexicalIndex
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage.versioned import current_dir

pytest.importorskip("faiss")

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in the boundary layer", "buckling of a thin shell"]
DIM = 16


def _texts(prefix: str, n: int) -> dict[str, str]:
    return {
        f"{prefix}{i}": f"{TOPICS[i % 6]} {prefix}{i} near {TOPICS[(i * 5 + 1) % 6]} tested" for i in range(n)
    }


def _write(path: Path, docs: dict[str, str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for doc_id, text in docs.items():
            f.write(json.dumps({"_id": doc_id, "text": text, "year": 2000 + len(doc_id)}) + "\n")
    return path


def _encoder(model: Path, texts: list[str]) -> TableEncoder:
    rng = np.random.default_rng(7)
    return TableEncoder(model, {t: rng.standard_normal(DIM) for t in sorted({*texts, *QUERIES})})


def _dense_reference(encoder: TableEncoder, docs: dict[str, str], k: int) -> list[list[str]]:
    ids, texts = list(docs), list(docs.values())
    _, order = brute_force(encoder.encode(texts), encoder.encode(QUERIES), k)
    return [[ids[i] for i in row] for row in order]


def _fresh_lexical(docs: dict[str, str]) -> list[list[tuple[str, float]]]:
    index = LexicalIndex.create(None)
    ids = list(docs)
    index.add(0, [Document(i, docs[i]) for i in ids])
    index.commit()
    return [[(ids[row], score) for row, score in hits] for hits in index.search(QUERIES, 10)]


def _lexical(index: SearchIndex) -> list[list[tuple[str, float]]]:
    found = index.search_text(QUERIES, k=10, mode="lexical")
    return [[(h.id, h.score) for h in hits] for hits in found]


def _same(found: list[list[tuple[str, float]]], expected: list[list[tuple[str, float]]]) -> None:
    assert [[i for i, _ in hits] for hits in found] == [[i for i, _ in hits] for hits in expected]
    for a, b in zip(found, expected, strict=True):
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5)


@pytest.fixture(params=["flat", "hnsw"])
def built(request, tmp_path: Path, tiny_bert: Path):
    docs = _texts("d", 40)
    extra = {
        **_texts("u", 6),
        "d3": "replaced text of d3 about jet noise",
        "d8": "d8 rewritten on wing stall",
    }
    encoder = _encoder(tiny_bert, [*docs.values(), *extra.values()])
    out = tmp_path / "idx"
    build_index(_write(tmp_path / "c.jsonl", docs), out, encoder, IndexOptions(kind=request.param))
    return out, encoder, docs, extra, request.param


def test_delete_then_compact_give_the_answers_of_a_rebuilt_index(built, tmp_path: Path) -> None:
    out, encoder, docs, _, kind = built
    gone = ["d0", "d5", "d6", "d7", "d39"]
    with SearchIndex.load(out) as before:
        lexical_before = _lexical(before)
    report = delete_documents(out, gone)
    remaining = {i: t for i, t in docs.items() if i not in gone}
    assert (report.documents, report.rows, report.count) == (5, 5, 35)
    assert report.masked == (5 if kind == "hnsw" else 0)  # a graph cannot lose nodes: masked
    with SearchIndex.load(out) as index:
        assert len(index.rows) == 35 and index.get_documents(gone) == [None] * 5
        dense = index.search_text(QUERIES, k=10, encoder=encoder, mode="dense")
        assert [[h.id for h in hits] for hits in dense] == _dense_reference(encoder, remaining, 10)
        # the lexical side: the old index's ranking without the deleted rows, scores unchanged
        expected = [[(i, s) for i, s in hits if i not in gone] for hits in lexical_before]
        _same([hits[: len(e)] for hits, e in zip(_lexical(index), expected, strict=True)], expected)
        hybrid = index.search_text(QUERIES, k=35, encoder=encoder)
        assert not {h.id for hits in hybrid for h in hits} & set(gone)
    compacted = compact_index(out)
    assert (compacted.rows, compacted.count, compacted.masked) == ((5 if kind == "hnsw" else 0), 35, 0)
    with SearchIndex.load(out) as index:
        assert index.store.vectors.ntotal == 35 and not len(index.store.masked)
        dense = index.search_text(QUERIES, k=10, encoder=encoder, mode="dense")
        assert [[h.id for h in hits] for hits in dense] == _dense_reference(encoder, remaining, 10)
        _same(_lexical(index), _fresh_lexical(remaining))  # BM25 statistics of the remaining only
        assert index.meta["corpus_fingerprint"] == _fresh_fingerprint(tmp_path, encoder, remaining)


def _fresh_fingerprint(tmp_path: Path, encoder: TableEncoder, docs: dict[str, str]) -> str:
    fresh = tmp_path / "fresh"
    build_index(
        _write(tmp_path / "fresh.jsonl", docs), fresh, encoder, IndexOptions(kind="flat", overwrite=True)
    )
    with SearchIndex.load(fresh) as index:
        return index.meta["corpus_fingerprint"]


def test_upsert_replaces_and_adds_as_a_rebuild_would(built, tmp_path: Path) -> None:
    out, encoder, docs, extra, kind = built
    report = build_index(
        _write(tmp_path / "u.jsonl", extra), out, encoder, IndexOptions(append=True, upsert=True)
    )
    assert (report.added, report.replaced, report.count) == (8, 2, 46)
    final = {**docs, **extra}
    with SearchIndex.load(out) as index:
        assert [d.text for d in index.get_documents(["d3", "d8"])] == [extra["d3"], extra["d8"]]
        dense = index.search_text(QUERIES, k=10, encoder=encoder, mode="dense")
        assert [[h.id for h in hits] for hits in dense] == _dense_reference(encoder, final, 10)
        assert index.meta["sources"][-1]["replaced"] == 2
    assert compact_index(out).count == 46
    with SearchIndex.load(out) as index:
        _same(_lexical(index), _fresh_lexical(final))
        assert index.meta["corpus_fingerprint"] == _fresh_fingerprint(tmp_path, encoder, final)
    # without --upsert an id already present is still refused
    with pytest.raises(InputError, match="duplicate document id"):
        build_index(
            _write(tmp_path / "again.jsonl", {"d3": extra["d3"]}), out, encoder, IndexOptions(append=True)
        )


def test_rows_of_deleted_documents_are_never_given_again(built, tmp_path: Path) -> None:
    out, encoder, docs, extra, _ = built
    delete_documents(out, ["d38", "d39"])  # the last rows
    build_index(_write(tmp_path / "u.jsonl", extra), out, encoder, IndexOptions(append=True, upsert=True))
    with SearchIndex.load(out) as index:
        rows = index.store.docs.rows_by_id(list(extra))
        assert min(r for held in rows.values() for r in held) == 40  # not 38: rows are permanent
        assert len(index.rows) == 38 + 6  # two of the eight replace documents


def test_deleting_a_missing_id_writes_nothing(built) -> None:
    out, _, _, _, _ = built
    live = current_dir(out)
    with pytest.raises(InputError, match="no document 'nope'"):
        delete_documents(out, ["d1", "nope"])
    assert current_dir(out) == live and sorted(p.name for p in out.iterdir() if p.name.startswith("v-")) == [
        live.name
    ]
    with SearchIndex.load(out) as index:
        assert len(index.rows) == 40


def test_cli_delete_and_compact(built, tmp_path: Path) -> None:
    out, _, _, _, kind = built
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n\nd2\n", encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["delete", str(out), "d9", "--ids", str(ids)])
    assert result.exit_code == 0, result.output
    assert "deleted 3 documents" in result.output and "holds 37" in result.output
    assert ("embedkit compact" in result.output) == (kind == "hnsw")  # says what masking costs
    result = runner.invoke(app, ["delete", str(out), "d9"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        f"error: no document 'd9' in {out}: nothing was deleted"
    ]
    result = runner.invoke(app, ["delete", str(out)])
    assert result.exit_code == 2 and "error:" in result.output
    result = runner.invoke(app, ["compact", str(out)])
    assert result.exit_code == 0, result.output
    assert "holds 37" in result.output


@pytest.mark.parametrize(
    ("step", "new_is_live"),
    [("version-staged", False), ("version-renamed", False), ("version-switched", True)],
)
def test_a_kill_during_a_delete_leaves_the_old_or_the_new_index(built, step: str, new_is_live: bool) -> None:
    out, _, docs, _, _ = built
    gone = ["d2", "d4"]
    code = f"from embedkit.index.edits import delete_documents; delete_documents({str(out)!r}, {gone!r})"
    env = {**os.environ, "EMBEDKIT_FAULT_AT": step}
    process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert process.returncode == -9, process.stderr
    expected = set(docs) - set(gone) if new_is_live else set(docs)
    with SearchIndex.load(out) as index:
        assert len(index.rows) == len(expected)
        held = {d.id for d in index.get_documents(list(docs)) if d is not None}
        assert held == expected
        lexical = {h.id for hits in index.search_text([" ".join(gone)], k=40, mode="lexical") for h in hits}
        assert lexical == expected & set(gone)  # the lexical side in step with the documents
    delete_documents(out, ["d1"])  # the next write clears what the killed one left
    assert not [p for p in out.iterdir() if p.name.startswith(".staging-")]


def test_cli_upsert(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "cli-idx"
    runner = CliRunner()
    first = _write(tmp_path / "a.jsonl", _texts("d", 6))
    result = runner.invoke(app, ["index", str(first), "--out", str(out), "--model", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    changes = _write(tmp_path / "b.jsonl", {"d1": "d1 rewritten", "d4": "d4 rewritten", "new": "a new one"})
    result = runner.invoke(app, ["index", str(changes), "--out", str(out), "--upsert"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "error: --upsert replaces documents of an existing index: use it with --append"
    ]
    result = runner.invoke(app, ["index", str(changes), "--out", str(out), "--append", "--upsert"])
    assert result.exit_code == 0, result.output
    assert "appended 3 documents (2 of them replacing documents)" in result.output
    with SearchIndex.load(out) as index:
        assert len(index.rows) == 7
        assert [d.text for d in index.get_documents(["d1", "d4", "new"])] == [
            "d1 rewritten",
            "d4 rewritten",
            "a new one",
        ]


def test_txt_upsert_meets_its_lines_and_append_numbers_on(tmp_path: Path, tiny_bert: Path) -> None:
    """A .txt corpus appended numbers its lines after the index's; upserted, line n replaces id n."""
    first, out = tmp_path / "a.txt", tmp_path / "idx"
    first.write_text("shock wave\nheat transfer\n", encoding="utf-8")
    build_index(first, out, tiny_bert, IndexOptions(device="cpu"))
    more = tmp_path / "b.txt"
    more.write_text("boundary layer\n", encoding="utf-8")
    build_index(more, out, options=IndexOptions(append=True, device="cpu"))
    changed = tmp_path / "c.txt"
    changed.write_text("mach number\n", encoding="utf-8")
    report = build_index(changed, out, options=IndexOptions(append=True, upsert=True, device="cpu"))
    assert report.replaced == 1
    with SearchIndex.load(out) as index:
        docs = index.get_documents(["1", "2", "3", "4"])
    assert [d.text if d else None for d in docs] == ["mach number", "heat transfer", "boundary layer", None]
