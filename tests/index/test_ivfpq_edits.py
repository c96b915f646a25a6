"""Edits of an IVF-PQ index: delete, upsert (with the calibration an append makes), compact.

References: the ids a search can return are the ids written minus the ids deleted, plus those
upserted (Python sets); each upserted document's stored text is the new one; a search of every
document returns each live one exactly once; `verify` passes after every edit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_helpers import TableEncoder, clustered
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.index.edits import compact_index, delete_documents
from embedkit.index.kinds import IVF_PQ_MIN_DOCS
from embedkit.jobs.index_options import IndexOptions

pytest.importorskip("faiss")
N = IVF_PQ_MIN_DOCS + 16


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_delete_upsert_and_compact_of_an_ivf_pq_index(tmp_path: Path, tiny_bert: Path) -> None:
    texts = [f"wing flow {i} pressure" for i in range(N)]
    corpus = _write(tmp_path / "c.jsonl", [{"_id": f"d{i}", "text": t, "n": i} for i, t in enumerate(texts)])
    upserts = [{"_id": f"d{i}", "text": f"guitar beach {i}", "n": -i} for i in range(1, 301, 2)]
    added = [{"_id": f"new{i}", "text": f"appended wing {i}", "n": N + i} for i in range(40)]
    every = [*texts, *(r["text"] for r in upserts + added)]
    encoder = TableEncoder(tiny_bert, dict(zip(every, clustered(len(every), 32, 12, seed=3), strict=True)))
    out = tmp_path / "idx"
    build_index(corpus, out, encoder, IndexOptions(kind="ivf-pq", calibrate=False))
    deleted = {f"d{i}" for i in range(0, 400, 2)}
    delete_documents(out, sorted(deleted))
    # an append after deletions calibrates (the index had none): it reads stored vectors back
    upserted = _write(tmp_path / "up.jsonl", upserts + added)
    build_index(upserted, out, encoder, IndexOptions(append=True, upsert=True))
    live = ({f"d{i}" for i in range(N)} - deleted) | {r["_id"] for r in added}
    for _ in range(2):  # after the edits, then after a compaction
        with SearchIndex.load(out) as index:
            assert index.meta["kind"] == "ivf-pq" and index.document_count == len(live)
            scores, ids = index.search(encoder.encode(["wing flow 5 pressure"]), k=len(live) + 50)
            found = [i for i in ids[0] if i is not None]
            assert len(found) == len(set(found)) == len(live) and set(found) == live
            stored = index.get_documents([r["_id"] for r in upserts])
            assert [d.text for d in stored] == [r["text"] for r in upserts]
        assert CliRunner().invoke(app, ["verify", str(out)]).exit_code == 0
        compact_index(out)
