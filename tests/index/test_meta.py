"""`embedkit-index.json` has one owner, `embedkit.index.meta.IndexMeta`: builds write what it reads."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from runtime_helpers import write_jsonl

from embedkit.errors import InputError
from embedkit.index import read_index_meta
from embedkit.index.folder import META_FILE, index_files_dir
from embedkit.index.meta import IndexMeta
from embedkit.jobs.index_build import build_index

pytest.importorskip("faiss")

# An index's metadata as an embedkit before `IndexMeta` wrote it: only the fields it had to have.
OLDEST = {
    "version": 1,
    "model": "/models/mini",
    "model_fingerprint": "abc123",
    "dim": 16,
    "kind": "flat",
    "params": {},
    "count": 3,
    "index_bytes": 237,
}


def test_every_build_writes_exactly_the_schema(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "idx"
    build_index(write_jsonl(tmp_path / "a.jsonl", ["a", "b"], ["one text", "two text"]), out, tiny_bert)
    written = json.loads((index_files_dir(out) / META_FILE).read_text())
    assert set(written) == {f.name for f in fields(IndexMeta)}
    assert written["count"] == 2 and written["lexical"]["engine"] == "tantivy"
    assert read_index_meta(out) == written


def test_older_records_take_defaults_and_damage_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / META_FILE
    meta = IndexMeta.from_json(OLDEST, path)
    assert (meta.lexical, meta.sources, meta.metric, meta.max_seq_length) == (None, [], "inner_product", None)
    assert IndexMeta.from_json({**OLDEST, "future_field": 1}, path).count == 3  # unknown fields ignored
    for key, bad, message in [
        ("dim", 0, "'dim' must be an integer >= 1"),
        ("kind", "auto", "'kind' must be one of flat, hnsw, ivf-pq"),
        ("lexical", ["x"], "'lexical' must be lexical settings or null"),
        ("version", 2, "index format 2"),
    ]:
        with pytest.raises(InputError, match=message):
            IndexMeta.from_json({**OLDEST, key: bad}, path)
    with pytest.raises(InputError, match="lacks index_bytes"):
        IndexMeta.from_json({k: v for k, v in OLDEST.items() if k != "index_bytes"}, path)
