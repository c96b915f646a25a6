"""FAISS labels are document rows: adding and removing an index's vectors by row.

A row is a vector's permanent key in its index: the document store's `row`, the lexical side's,
a pushed collection's primary key (`embedkit.index.docstore`). An index that never lost a vector
is positional: label = position = row, as faiss's plain `add` numbers them. Removing vectors:
- flat: the index is wrapped in an `IndexIDMap2` (each vector's row kept beside it) and the vectors
  are removed in place; exact search stays exact;
- ivf-pq: IVF lists keep each vector's label already; vectors are removed in place (one scan of
  the lists);
- hnsw: a graph cannot lose nodes. The rows are masked (the document store records them) and
  filtered out at search with an ID selector until `embedkit compact` rebuilds the graph from the
  live vectors (as an `IndexIDMap2`). A masked vector costs its memory and a little search time:
  the graph search walks past masked nodes, so with many of them it needs a wider search.
After a removal new vectors are added under their rows (`add_with_ids`).

Searching by row, among some rows, is `embedkit.index.local_store`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedkit.errors import InputError
from embedkit.index.kinds import FaissIndex, faiss_module
from embedkit.index.quantized import codes, is_binary, is_quantized, new_index


def _idmapped(index: FaissIndex) -> bool:
    faiss = faiss_module()
    return isinstance(
        index, (faiss.IndexIDMap, faiss.IndexIDMap2, faiss.IndexBinaryIDMap, faiss.IndexBinaryIDMap2)
    )


def add_rows(index: FaissIndex, vectors: np.ndarray, first_row: int) -> None:
    """Add `vectors` under rows first_row, first_row + 1, ... (positionally where they are the
    positions, else with their rows as labels)."""
    if is_binary(index):
        vectors = codes(vectors)  # a binary index holds the signs, packed (`embedkit.index.quantized`)
    if first_row == index.ntotal and not _idmapped(index):
        index.add(vectors)
        return
    rows = np.arange(first_row, first_row + len(vectors), dtype=np.int64)
    try:
        index.add_with_ids(vectors, rows)
    except RuntimeError:
        raise InputError(
            f"the index holds {index.ntotal} vectors and cannot take row {first_row}: rebuild the index"
        ) from None


def remove_rows(index: FaissIndex, kind: str, rows: np.ndarray) -> tuple[FaissIndex, bool]:
    """Remove the vectors of `rows` (sorted int64): the index to save, and whether they are only
    masked (HNSW) rather than gone."""
    faiss = faiss_module()
    if kind == "hnsw" or is_quantized(index):  # a quantized index's codes are masked like a graph's
        return index, True
    if kind == "flat" and not _idmapped(index):
        index = _labelled_copy(index, np.arange(index.ntotal, dtype=np.int64))
    removed = index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(rows, dtype=np.int64)))
    if removed != len(rows):
        raise InputError(f"the index file held {removed} of the {len(rows)} vectors to remove: rebuild it")
    return index, False


def labels(index: FaissIndex) -> np.ndarray:
    """Each stored vector's row, in the index's order."""
    if _idmapped(index):
        rows: np.ndarray = faiss_module().vector_to_array(index.id_map)
        return rows.astype(np.int64)
    return np.arange(index.ntotal, dtype=np.int64)


def compacted(
    index: FaissIndex, kind: str, params: dict[str, Any], masked: np.ndarray, full: np.ndarray | None = None
) -> FaissIndex:
    """A new index of the live vectors of `index` (every label but `masked`), under their rows; a
    quantized index is made again from its float vectors `full` (`embedkit.index.quantized`)."""
    faiss = faiss_module()
    inner = index.index if _idmapped(index) else index
    rows = labels(index)
    keep = ~np.isin(rows, masked)
    vectors = inner.reconstruct_n(0, inner.ntotal)[keep] if full is None else full[np.sort(rows[keep])]
    rows = rows[keep] if full is None else np.sort(rows[keep])
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    made = new_index(kind, index.d, params)
    if not made.is_trained and len(vectors):  # int8: the live vectors' ranges
        made.train(vectors)
    fresh = faiss.IndexBinaryIDMap2(made) if is_binary(made) else faiss.IndexIDMap2(made)
    if len(vectors):
        fresh.add_with_ids(codes(vectors) if is_binary(made) else vectors, rows)
    return fresh


def _labelled_copy(index: FaissIndex, labels: np.ndarray) -> FaissIndex:  # an IndexIDMap2, same vectors
    copy = faiss_module().IndexIDMap2(faiss_module().IndexFlatIP(index.d))
    if index.ntotal:
        copy.add_with_ids(index.reconstruct_n(0, index.ntotal), labels)
    return copy
