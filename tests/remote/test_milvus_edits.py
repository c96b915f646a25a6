"""Deletions, updates and metadata filters carried to Milvus (Milvus Lite): the local index's answers.

References: after deleting and upserting documents locally and pushing again (`--append` or not),
the collection's dense top-10 and documents must be the local index's (itself checked against
brute force in tests/index), and no deleted id may remain; a filtered dense search there must
give the local filtered one, and every lexical hit must pass the filter as the local store
evaluates it. Skipped without pymilvus / milvus-lite.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder

from embedkit import SearchIndex, build_index
from embedkit.errors import InputError
from embedkit.index.edits import delete_documents
from embedkit.index.where_sql import rows_where
from embedkit.jobs.index_options import IndexOptions
from embedkit.remote.base import RemoteTarget
from embedkit.remote.push import push_index
from embedkit.remote.search import open_pushed

pytest.importorskip("faiss")
pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in the boundary layer", "buckling of a thin shell"]
WHERE = [
    "year >= 2010",
    'lang = "en" and not year < 2005',
    "lang in ('de', 'fr') or flag = true",
    "published < 2018-06-01",
    "not (year >= 2010 or lang = 'de')",
    'tags contains "b"',
    'tags contains 2 or not (lang = "en" or not tags contains "a")',
]


def _records(prefix: str, n: int, offset: int = 0) -> list[dict]:
    records = []
    for i in range(offset, offset + n):
        record = {
            "_id": f"{prefix}{i}",
            "text": f"{TOPICS[i % 6]} {prefix}{i} with {TOPICS[(i * 5 + 1) % 6]}",
        }
        if i % 7:
            record["year"] = 2000 + (i * 3) % 20
        if i % 5:
            record["lang"] = ["en", "de", "fr"][i % 3]
        record["published"] = f"20{15 + i % 6}-0{1 + i % 9}-1{i % 10}"
        record["flag"] = i % 4 == 0
        if i % 6:  # a list field, filtered by membership (`contains`)
            record["tags"] = [["a", "b"], ["b"], ["c", 2], [1, 2, "a"], []][i % 5]
        records.append(record)
    return records


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def pushed(tmp_path: Path, tiny_bert: Path):
    first = _records("d", 50)
    updates = [{**r, "text": r["text"] + " revised", "year": 1999} for r in first[10:14]] + _records("n", 5)
    rng = np.random.default_rng(1)
    texts = [r["text"] for r in first + updates] + QUERIES
    encoder = TableEncoder(tiny_bert, {t: rng.standard_normal(32) for t in texts})
    out = tmp_path / "idx"
    build_index(_write(tmp_path / "c.jsonl", first), out, encoder, IndexOptions(kind="flat"))
    target = RemoteTarget.parse(str(tmp_path / "milvus.db"), "docs")
    push_index(out, target, batch_size=16)
    return out, encoder, target, tmp_path / "u.jsonl", updates


def _same_dense(local: SearchIndex, remote: SearchIndex, encoder, where: str | None = None) -> None:
    here = local.search_text(QUERIES, k=10, encoder=encoder, mode="dense", where=where)
    there = remote.search_text(QUERIES, k=10, encoder=encoder, mode="dense", where=where)
    for a, b in zip(here, there, strict=True):
        assert [h.id for h in b] == [h.id for h in a]
        np.testing.assert_allclose([h.score for h in b], [h.score for h in a], atol=1e-5)


@pytest.mark.parametrize("append", [True, False])
def test_pushing_again_carries_deletions_and_updates(pushed, append: bool) -> None:
    out, encoder, target, corpus, updates = pushed
    delete_documents(out, ["d0", "d1", "d49"])
    build_index(_write(corpus, updates), out, encoder, IndexOptions(append=True, upsert=True))
    report = push_index(out, target, append=append, batch_size=16)
    assert report.total == 50 - 3 + 5
    assert report.sent == (9 if append else 52)  # 4 replaced (new rows) and 5 new, or everything
    with SearchIndex.load(out) as local, open_pushed(target) as remote:
        assert len(remote.rows) == len(local.rows) == 52
        _same_dense(local, remote, encoder)
        assert remote.get_documents(["d0", "d1", "d49"]) == [None] * 3
        assert [d.text for d in remote.get_documents(["d10", "d13"])] == [
            d.text for d in local.get_documents(["d10", "d13"])
        ]
        assert remote.get_documents(["d10"])[0].metadata["year"] == 1999


def test_filters_run_inside_milvus(pushed) -> None:
    out, encoder, target, _, _ = pushed
    with SearchIndex.load(out) as local, open_pushed(target) as remote:
        for where in WHERE:
            _same_dense(local, remote, encoder, where)
            allowed = {d.id for d in local.rows.documents(rows_where(local.store.docs, where).tolist())}
            for hits in remote.search_text(QUERIES, k=10, encoder=encoder, where=where):  # hybrid
                assert hits and {h.id for h in hits} <= allowed
        with pytest.raises(InputError, match="unknown metadata field 'colour'"):
            remote.search_text(QUERIES, k=3, encoder=encoder, where="colour = 'red'")
        with pytest.raises(InputError, match="position 6"):
            remote.search_text(QUERIES, k=3, encoder=encoder, where="year 2010")
        with pytest.raises(InputError, match="not run on Milvus"):  # its json_contains has no unknown
            remote.search_text(QUERIES, k=3, encoder=encoder, where='year > 1 and not tags contains "a"')
