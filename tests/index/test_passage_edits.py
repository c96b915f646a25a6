"""Deleting, upserting and filtering in an index of passages.

References: an index rebuilt from the corpus without the deleted documents (or with the upserted
ones changed), searched the same way; and a Python predicate over the corpus's documents applied
to the unfiltered rankings (a filter must not change a passing document's best-passage score).

The passages' vectors come from a table fixed by each text's hash (`TableEncoder`), so a rebuilt
index holds exactly the vectors of the edited one. A real model embeds a passage in other batches
when the index is rebuilt, which moves the last bits of its vector (float32 sums in another order:
about 1e-7 on a cosine, 4e-6 after a z-score fusion divides by the scores' spread); compaction never
embeds again, so with a model the two indexes agree to that noise, not bit for bit.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from runtime_helpers import TableEncoder
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.index.edits import compact_index, delete_documents
from embedkit.jobs.index_options import IndexOptions
from embedkit.search.fusion import fuse

pytest.importorskip("faiss")

WORDS = ["wing", "flow", "air", "pressure", "boundary", "layer", "shock", "wave", "heat", "transfer"]
WORDS += ["mach", "number", "speed", "body", "drag", "lift"]
QUERIES = ["shock wave drag", "heat transfer", "boundary layer flow", "mach number speed body"]
SPLIT = "8:3"
GONE = ["d5", "d12", "d30"]
runner = CliRunner()


def _documents(n: int = 36) -> list[dict]:
    rng = random.Random(1)
    return [
        {
            "_id": f"d{i}",
            "title": f"title {i}" if i % 3 else "",
            "text": " ".join(rng.choices(WORDS, k=rng.randint(3, 30))),
            "year": 2000 + i % 7,
            "lang": "en" if i % 2 else "de",
        }
        for i in range(n)
    ]


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def _ranked(index: SearchIndex, mode: str, digits: int | None = 4, **options) -> list[dict[str, float]]:
    hits = index.search_text(QUERIES, k=100, mode=mode, **options)
    return [{h.id: h.score if digits is None else round(h.score, digits) for h in q} for q in hits]


@pytest.fixture
def hashed(tiny_bert: Path) -> TableEncoder:
    """Passage vectors that do not depend on the batch a passage is embedded in (module docstring)."""
    return TableEncoder(tiny_bert, {}, dim=32)


@pytest.fixture
def built(tmp_path: Path, hashed: TableEncoder) -> tuple[Path, list[dict]]:
    docs = _documents()
    out = tmp_path / "idx"
    build_index(
        _write(tmp_path / "c.jsonl", docs), out, hashed, IndexOptions(passages=SPLIT, device="cpu")
    )
    with SearchIndex.load(out) as index:
        assert len(index.rows) > index.document_count == len(docs)  # several passages a document
    return out, docs


def test_delete_removes_every_passage_as_a_rebuilt_index(built, tmp_path: Path, hashed: TableEncoder) -> None:
    out, docs = built
    result = runner.invoke(app, ["delete", str(out), *GONE])
    assert result.exit_code == 0, result.output
    kept = [d for d in docs if d["_id"] not in GONE]
    ref = tmp_path / "ref"
    build_index(
        _write(tmp_path / "kept.jsonl", kept), ref, hashed, IndexOptions(passages=SPLIT, device="cpu")
    )
    with SearchIndex.load(out) as index, SearchIndex.load(ref) as rebuilt:
        assert index.store.docs.rows_by_id(GONE) == {}
        assert index.get_documents(GONE) == [None] * len(GONE)
        assert (len(index.rows), index.document_count) == (len(rebuilt.rows), rebuilt.document_count)
        assert _ranked(index, "dense") == _ranked(rebuilt, "dense")
        # BM25 keeps counting deleted passages in its statistics until a compaction: same documents
        assert [set(q) for q in _ranked(index, "lexical")] == [set(q) for q in _ranked(rebuilt, "lexical")]
    compact_index(out)
    with SearchIndex.load(out) as index, SearchIndex.load(ref) as rebuilt:  # bit for bit
        for mode in ("dense", "lexical"):
            assert _ranked(index, mode, None) == _ranked(rebuilt, mode, None)
        hybrid = {"fusion": "zscore", "alpha": 0.6}
        assert _ranked(index, "hybrid", None, **hybrid) == _ranked(rebuilt, "hybrid", None, **hybrid)


def test_hnsw_delete_masks_every_passage(tmp_path: Path, tiny_bert: Path) -> None:
    docs = _documents()
    out = tmp_path / "idx"
    build_index(
        _write(tmp_path / "c.jsonl", docs),
        out,
        tiny_bert,
        IndexOptions(passages=SPLIT, kind="hnsw", device="cpu"),
    )
    report = delete_documents(out, GONE)
    with SearchIndex.load(out) as index:
        assert report.masked == len(index.store.masked) > len(GONE)  # every passage of each, masked
        assert index.document_count == len(docs) - len(GONE)
        for mode in ("dense", "lexical"):
            found = set().union(*_ranked(index, mode))
            assert found and found.isdisjoint(GONE)


def test_upsert_replaces_every_passage_as_a_rebuilt_index(
    built, tmp_path: Path, hashed: TableEncoder
) -> None:
    out, docs = built
    changed = [{**docs[7], "text": "heat transfer " * 12}, {**docs[20], "text": "lift"}]
    build_index(
        _write(tmp_path / "new.jsonl", changed),
        out,
        hashed,
        IndexOptions(append=True, upsert=True, device="cpu"),
    )
    now = {d["_id"]: d for d in [*docs, *changed]}
    ref = tmp_path / "ref"
    build_index(
        _write(tmp_path / "all.jsonl", list(now.values())),
        ref,
        hashed,
        IndexOptions(passages=SPLIT, device="cpu"),
    )
    compact_index(out)  # BM25 statistics as fresh
    with SearchIndex.load(out) as index, SearchIndex.load(ref) as rebuilt:
        assert (len(index.rows), index.document_count) == (len(rebuilt.rows), rebuilt.document_count)
        assert index.get_documents(["d7"])[0].text == changed[0]["text"]
        for mode in ("dense", "lexical"):
            assert _ranked(index, mode, None) == _ranked(rebuilt, mode, None)


def _passes(doc: dict) -> bool:
    return doc["year"] >= 2003 and doc["lang"] == "en"


WHERE = 'year >= 2003 and lang = "en"'


def test_where_filters_documents_of_a_passage_index(built) -> None:
    out, docs = built
    passing = {d["_id"] for d in docs if _passes(d)}
    assert 0 < len(passing) < len(docs)
    with SearchIndex.load(out) as index:
        assert (
            set(index.store.docs.ids_of_rows(index.store.compile_filter(WHERE).tolist()).values()) == passing
        )
        whole = {mode: _ranked(index, mode, None) for mode in ("dense", "lexical")}
        for mode, unfiltered in whole.items():
            want = [{d: round(s, 4) for d, s in q.items() if d in passing} for q in unfiltered]
            assert _ranked(index, mode, where=WHERE) == want  # a best passage's score is unchanged
        # fusion sees only passing documents: the fused brute-force rankings
        fused = _ranked(index, "hybrid", None, where=WHERE, fusion="zscore", alpha=0.6)
        vectors = index.encoder().encode(QUERIES, normalize=True)
        scores, ids = index.search(vectors, k=4, where=WHERE)
    for q in range(len(QUERIES)):
        dense = {d: s for d, s in whole["dense"][q].items() if d in passing}
        lexical = {d: s for d, s in whole["lexical"][q].items() if d in passing}
        names = sorted(set(dense) | set(lexical))
        sides = [
            sorted(((names.index(d), s) for d, s in side.items()), key=lambda p: -p[1])
            for side in (dense, lexical)
        ]
        want = {names[f.row]: round(f.score, 4) for f in fuse(*sides, 100, method="zscore", alpha=0.6)}
        assert fused[q] == pytest.approx(want, abs=2e-4)
        assert ids[q] == sorted(dense, key=lambda d: -dense[d])[:4]


def test_cli_index_passages_then_search(tmp_path: Path, tiny_bert: Path) -> None:
    rng = random.Random(2)
    docs = [{"_id": f"d{i}", "title": "", "text": " ".join(rng.choices(WORDS, k=300))} for i in range(12)]
    corpus, out = _write(tmp_path / "c.jsonl", docs), tmp_path / "idx"
    result = runner.invoke(
        app, ["index", str(corpus), "--out", str(out), "-m", str(tiny_bert), "--passages", "48:16"]
    )
    assert result.exit_code == 0, result.output
    assert "passages" in result.output
    with SearchIndex.load(out) as index:
        assert index.meta["passages"]["tokens"] == 48
        # calibrated: too few pseudo queries from 12 documents, so the default, with the reason
        assert index.meta["fusion"]["method"] == "prf" and "fewer than" in index.meta["fusion"]["reason"]
        assert len(index.rows) > index.document_count == len(docs)
    search = ["search", str(out), "shock wave", "--device", "cpu", "--json", "--passages"]
    search += ["--include", "text,passage"]
    result = runner.invoke(app, search)
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.splitlines()[-1])
    assert line["mode"] == "hybrid" and len(line["hits"]) == 10
    assert len({h["id"] for h in line["hits"]}) == 10  # each document once
    assert all(
        h["text"][h["passage"]["start"] : h["passage"]["end"]] == h["passage"]["text"] for h in line["hits"]
    )
    result = runner.invoke(app, ["calibrate", str(out), "--device", "cpu"])
    assert result.exit_code == 0 and "fusion prf 0.7" in result.output, result.output
