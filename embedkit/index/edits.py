"""Changing the documents of an index: delete, and compact (upsert is `build_index(upsert=True)`).

Each edit writes a new version of the index, as an append does (`embedkit.storage.versioned`): the
FAISS file and the document store (with its lexical side) are copied into a staging folder,
changed there together, and made live in one rename; a kill at any point leaves the old version
or the new one, and one writer at a time holds the index (`embedkit.storage.locking`).

What a deletion costs, by index kind (`embedkit.index.rows`):
- flat and ivf-pq: the vectors are removed from the file; nothing is left behind;
- hnsw: the vectors stay in the graph, masked: search filters them out (an ID selector; a wider
  graph search where many are masked) until `embedkit compact` rebuilds the graph from the live
  vectors (no re-embedding: HNSW stores its vectors as they are; about as long as building it);
- the lexical side (tantivy) deletes the documents at once, but like Lucene counts them in BM25's
  statistics (N, document frequencies, average length) until their segment is merged, so scores
  drift slightly from a fresh index's; `compact` rebuilds the lexical side from the documents.
Deleting an id the index does not hold is an `InputError` and nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.fingerprint import CorpusFingerprint
from embedkit.errors import InputError
from embedkit.index.docstore import DocStore
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, index_files_dir, read_index_meta
from embedkit.index.kinds import FaissIndex
from embedkit.index.lexical import lexical_settings
from embedkit.index.lexical_rebuild import fill_lexical
from embedkit.index.meta import IndexMeta
from embedkit.index.quantized import open_full_vectors, quantization
from embedkit.index.rows import compacted, remove_rows
from embedkit.index.version_copy import copy_store, read_faiss_copy, write_faiss
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.locking import locked
from embedkit.storage.versioned import new_version


@dataclass(frozen=True)
class EditReport:
    """What `delete_documents` or `compact_index` did."""

    path: Path
    kind: str
    documents: int  # documents deleted, or (compact) documents held
    rows: int  # rows (vectors) removed or masked, or (compact) masked vectors dropped
    count: int  # documents held afterwards
    masked: int  # vectors of deleted documents still in the FAISS file afterwards (hnsw)
    seconds: float


def rows_to_delete(store: DocStore, ids: Sequence[str], place: object) -> np.ndarray:
    """Every row of the documents `ids` (sorted); an unknown id is an `InputError` naming it."""
    wanted = list(dict.fromkeys(str(i) for i in ids))
    if not wanted:
        raise InputError("no document ids to delete")
    found = store.rows_by_id(wanted)
    missing = [doc_id for doc_id in wanted if doc_id not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InputError(f"no document {missing[0]!r} in {place}{more}: nothing was deleted")
    return np.asarray(sorted(row for rows in found.values() for row in rows), dtype=np.int64)


def remove_documents(
    index: FaissIndex, store: DocStore, kind: str, rows: np.ndarray, fingerprint: str | None
) -> tuple[FaissIndex, str | None]:
    """Remove `rows` from the FAISS index and the store (with its lexical side), in a staging copy.

    Returns the index to save and the corpus fingerprint without those documents (the fingerprint
    is a sum of document hashes: `embedkit.data.fingerprint`)."""
    if fingerprint is not None:
        running = CorpusFingerprint(fingerprint)
        running.remove({doc.id: doc for doc in store.by_rows(rows.tolist()) if doc is not None}.values())
        fingerprint = running.hex
    index, masked = remove_rows(index, kind, rows)
    store.remove(rows.tolist(), masked)
    return index, fingerprint


@locked("out")
def delete_documents(out: str | Path, ids: Sequence[str]) -> EditReport:
    """Delete the documents `ids` (every row of each) from the index in `out`, as a new version."""
    out = Path(out)
    start = time.perf_counter()
    old = read_index_meta(out)
    live = index_files_dir(out)
    with DocStore.open(live / DOCS_FILE) as store:  # checked before anything is written
        rows = rows_to_delete(store, ids, out)
    with new_version(out) as tmp:
        index, store = read_faiss_copy(out, tmp, old), copy_store(out, tmp, old)
        try:
            index, fingerprint = remove_documents(
                index, store, old["kind"], rows, old.get("corpus_fingerprint")
            )
            store.commit()
            masked = len(store.deletions.masked_rows())
            lexical = store.lexical.settings.to_json() if store.lexical is not None else None
            documents = store.document_count() if store.has_passages else None
        finally:
            store.close()
        source = {"deleted": len(set(ids))}
        changes = {"corpus_fingerprint": fingerprint, "lexical": lexical, "documents": documents}
        meta = _recorded(old, index, tmp, source, **changes)
    held = meta.count - masked if documents is None else documents  # documents, not passages
    return EditReport(out, old["kind"], len(set(ids)), len(rows), held, masked, _since(start))


@locked("out")
def compact_index(out: str | Path) -> EditReport:
    """Drop the masked vectors of deleted documents (HNSW: the graph rebuilt from the live vectors)
    and rebuild the lexical side from the documents, so scores are those of a fresh index.

    An index from which nothing was ever deleted is left as it is (no new version)."""
    out = Path(out)
    start = time.perf_counter()
    old = read_index_meta(out)
    live = index_files_dir(out)
    with DocStore.open(live / DOCS_FILE) as store:
        if not store.deletions.any():
            count = store.document_count()
            return EditReport(out, old["kind"], count, 0, count, 0, _since(start))
    with new_version(out) as tmp:
        index = read_faiss_copy(out, tmp, old)
        store = _store_without_lexical(out, tmp)
        try:
            masked = store.deletions.masked_rows()
            if len(masked):
                full = None  # a quantized index is made again from its float vectors
                if quantization(old["params"]):
                    full = open_full_vectors(tmp, int(old["dim"]), store.next_row())
                index = compacted(index, old["kind"], old["params"], masked, full)
            store.deletions.unmask()
            lexical = None
            if old.get("lexical") is not None:  # an earlier embedkit's lexical side is upgraded too
                lexical = fill_lexical(store, lexical_settings(old["lexical"])).to_json()
            store.commit()
            count = store.document_count()  # documents (in an index of passages, not its vectors)
        finally:
            store.close()
        _recorded(old, index, tmp, {"compacted": len(masked)}, lexical=lexical)
    return EditReport(out, old["kind"], count, len(masked), count, 0, _since(start))


def _store_without_lexical(out: Path, tmp: Path) -> DocStore:
    """The live document store copied into `tmp`, without its lexical side (to be rebuilt)."""
    import shutil

    shutil.copy2(index_files_dir(out) / DOCS_FILE, tmp / DOCS_FILE)
    return DocStore.open(tmp / DOCS_FILE, writable=True)


def _recorded(
    old: dict[str, Any], index: FaissIndex, tmp: Path, source: dict[str, Any], **changes: Any
) -> IndexMeta:
    """Save `index` in `tmp` and write the metadata of the new version."""
    meta = IndexMeta.from_json(old, tmp / META_FILE).updated_now(
        count=int(index.ntotal),
        index_bytes=write_faiss(index, tmp / INDEX_FILE),
        sources=[*old.get("sources", []), source],
        **changes,
    )
    write_json_atomic(tmp / META_FILE, meta.to_json())
    return meta


def _since(start: float) -> float:
    return time.perf_counter() - start
