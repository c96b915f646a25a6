"""FAISS labels are document rows: adding, removing and searching an index by row.

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

Every search returns `k` hits whenever `k` rows are allowed, filtered or not. Search among some
rows (a metadata filter, or the rows not masked) uses faiss's ID selectors
(`SearchParameters(sel=...)`). Flat search is exact; an HNSW search looks at `max(efSearch, k)`
candidates (its answers come from that list, as FAISS's own guidance says to size it), and an
HNSW or IVF search that still finds fewer than `k` is repeated with a wider search (efSearch or
nprobe x 4, up to the whole index); an HNSW search that still falls short is answered by an exact
search over the allowed rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedkit.errors import InputError
from embedkit.index.kinds import HNSW_EF_SEARCH, _faiss, new_faiss_index

WIDEN = 4  # efSearch / nprobe factor when a filtered search found too few


def _idmapped(index) -> bool:
    faiss = _faiss()
    return isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2))


def add_rows(index, vectors: np.ndarray, first_row: int) -> None:
    """Add `vectors` under rows first_row, first_row + 1, ... (positionally where they are the
    positions, else with their rows as labels)."""
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


def remove_rows(index, kind: str, rows: np.ndarray):  # -> (faiss.Index, masked: bool)
    """Remove the vectors of `rows` (sorted int64): the index to save, and whether they are only
    masked (HNSW) rather than gone."""
    faiss = _faiss()
    if kind == "hnsw":
        return index, True
    if kind == "flat" and not _idmapped(index):
        index = _labelled_copy(index, np.arange(index.ntotal, dtype=np.int64))
    removed = index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(rows, dtype=np.int64)))
    if removed != len(rows):
        raise InputError(f"the index file held {removed} of the {len(rows)} vectors to remove: rebuild it")
    return index, False


def compacted(index, kind: str, params: dict[str, Any], masked: np.ndarray):  # -> faiss.Index
    """A new index of the live vectors of `index` (every label but `masked`), under their rows."""
    inner = index.index if _idmapped(index) else index
    labels = (
        _faiss().vector_to_array(index.id_map).astype(np.int64)
        if _idmapped(index)
        else np.arange(index.ntotal, dtype=np.int64)
    )
    keep = ~np.isin(labels, masked)
    vectors = inner.reconstruct_n(0, inner.ntotal)[keep]
    fresh = _faiss().IndexIDMap2(new_faiss_index(kind, index.d, params))
    if len(vectors):
        fresh.add_with_ids(np.ascontiguousarray(vectors), labels[keep])
    return fresh


def _labelled_copy(index, labels: np.ndarray):  # -> faiss.IndexIDMap2 of the same vectors
    copy = _faiss().IndexIDMap2(_faiss().IndexFlatIP(index.d))
    if index.ntotal:
        copy.add_with_ids(index.reconstruct_n(0, index.ntotal), labels)
    return copy


def search_rows(
    index,
    kind: str,
    queries: np.ndarray,
    k: int,
    allowed: np.ndarray | None,
    masked: np.ndarray,
    params: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray]:
    """faiss's (scores, rows) [q, k] of normalised `queries`, among the `allowed` rows (sorted; None:
    all) and never the `masked` ones; padded with row -1 only where fewer than `k` rows are allowed."""
    faiss = _faiss()
    selector = None  # every row
    available = int(index.ntotal)
    plain = None  # an unfiltered IVF search as the index is set (on a GPU too), before any widening
    if allowed is None and not len(masked) and kind != "hnsw":
        plain = index.search(queries, k)
        if kind == "flat" or ((plain[1] >= 0).sum(axis=1) >= min(k, available)).all():
            return plain
    if allowed is not None:
        selector = faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
        available = len(allowed)
    elif len(masked):
        selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.ascontiguousarray(masked)))
        available = int(index.ntotal) - len(masked)
    want = min(k, available)
    width = int(params.get("ef_search", HNSW_EF_SEARCH)) if kind == "hnsw" else int(params.get("nprobe", 1))
    limit = int(index.ntotal) if kind == "hnsw" else int(params.get("nlist", 1))
    while True:
        try:
            scores, rows = index.search(queries, k, params=_parameters(kind, selector, width, k))
        except RuntimeError as exc:  # a faiss build or device without ID selectors for this index
            if plain is not None:  # nor per-search parameters: the index's own answer stands
                return plain
            reason = str(exc).strip().splitlines()[-1]
            raise InputError(f"this index cannot search among some rows (drop --gpu?): {reason}") from None
        short = (rows >= 0).sum(axis=1) < want
        if kind == "flat" or not short.any() or width >= limit:
            break
        width = min(limit, width * WIDEN)
    if kind == "hnsw" and short.any():
        rows_allowed = allowed if allowed is not None else np.setdiff1d(_labels(index), masked)
        exact_scores, exact_rows = _exact(index, queries[short], k, rows_allowed)
        scores[short], rows[short] = exact_scores, exact_rows
    return scores, rows


def _parameters(kind: str, selector, width: int, k: int):  # -> faiss.SearchParameters
    """The search's parameters: HNSW's efSearch at least k (its candidate list is where the k
    results come from: 64 candidates cannot give 1,000 hits), IVF's nprobe; `selector` None: all."""
    faiss = _faiss()
    chosen = {} if selector is None else {"sel": selector}
    if kind == "hnsw":
        return faiss.SearchParametersHNSW(efSearch=max(width, k), **chosen)
    if kind == "ivf-pq":
        return faiss.SearchParametersIVF(nprobe=width, **chosen)
    return faiss.SearchParameters(**chosen)


def _labels(index) -> np.ndarray:
    if _idmapped(index):
        return _faiss().vector_to_array(index.id_map).astype(np.int64)
    return np.arange(index.ntotal, dtype=np.int64)


def _exact(index, queries: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k over the stored vectors of `rows` (HNSW stores them unencoded)."""
    vectors = np.asarray(index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64)), np.float32)
    scores = queries @ vectors.T  # (q, len(rows))
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    found_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    found_rows = np.full((len(queries), k), -1, dtype=np.int64)
    found_scores[:, : top.shape[1]] = np.take_along_axis(scores, top, axis=1)
    found_rows[:, : top.shape[1]] = rows[top]
    return found_scores, found_rows
