"""FAISS by row (`embedkit.index.rows`) for each kind: removals, additions after them, filtered search.

References: numpy's exact inner products over the rows allowed (flat must equal them), the count
of hits a filter can give (min(k, rows allowed): every kind must reach it), and rows removed or
masked, which must never come back.
"""

from __future__ import annotations

import numpy as np
import pytest
from runtime_helpers import clustered

from embedkit.index.kinds import new_faiss_index
from embedkit.index.local_store import search_rows
from embedkit.index.rows import add_rows, compacted, remove_rows

pytest.importorskip("faiss")

DIM = 16
PARAMS = {
    "flat": {},
    "hnsw": {"M": 8, "ef_construction": 40, "ef_search": 4},  # a narrow search: the filter must widen it
    "ivf-pq": {"nlist": 16, "m": 4, "nbits": 4, "nprobe": 1},
}


def _index(kind: str, vectors: np.ndarray):
    index = new_faiss_index(kind, DIM, PARAMS[kind])
    if kind == "ivf-pq":
        index.train(vectors)
    add_rows(index, vectors, 0)
    return index


@pytest.mark.parametrize("kind", list(PARAMS))
def test_removed_rows_never_return_and_new_rows_follow_them(kind: str) -> None:
    vectors = clustered(800, DIM, 8, seed=0)
    index = _index(kind, vectors)
    gone = np.arange(0, 800, 3, dtype=np.int64)
    index, masked = remove_rows(index, kind, gone)
    assert masked == (kind == "hnsw") and index.ntotal == (800 if masked else 800 - len(gone))
    masked_rows = gone if masked else np.empty(0, np.int64)
    extra = clustered(20, DIM, 2, seed=1)
    add_rows(index, extra, 800)  # rows continue past the removed ones
    scores, rows = search_rows(index, kind, extra, 1, None, masked_rows, PARAMS[kind])
    if kind != "ivf-pq":  # PQ codes are approximate: a new vector need not find itself first
        assert rows[:, 0].tolist() == list(range(800, 820))
    queries = vectors[gone[:10]]
    _, rows = search_rows(index, kind, queries, 20, None, masked_rows, PARAMS[kind])
    assert not set(rows.ravel().tolist()) & set(gone.tolist())
    if kind != "ivf-pq":  # unfiltered, an IVF search at nprobe 1 may find fewer than k, as ever
        assert (rows >= 0).all()


@pytest.mark.parametrize("kind", list(PARAMS))
@pytest.mark.parametrize("allowed_count", [3, 40, 600])
def test_filtered_search_returns_k_allowed_rows(kind: str, allowed_count: int) -> None:
    vectors = clustered(800, DIM, 8, seed=2)
    index = _index(kind, vectors)
    masked = np.arange(0, 800, 50, dtype=np.int64) if kind == "hnsw" else np.empty(0, np.int64)
    if kind == "hnsw":
        index, _ = remove_rows(index, kind, masked)
    rng = np.random.default_rng(3)
    allowed = np.sort(rng.choice(np.setdiff1d(np.arange(800), masked), allowed_count, replace=False))
    queries = clustered(6, DIM, 8, seed=4)
    k = 10
    scores, rows = search_rows(index, kind, queries, k, allowed, masked, PARAMS[kind])
    want = min(k, allowed_count)
    assert ((rows >= 0).sum(axis=1) == want).all()
    assert set(rows[rows >= 0].tolist()) <= set(allowed.tolist())
    if kind == "flat":
        exact = queries @ vectors[allowed].T
        top = allowed[np.argsort(-exact, axis=1, kind="stable")[:, :want]]
        assert rows[:, :want].tolist() == top.tolist()
        np.testing.assert_allclose(scores[:, :want], np.sort(exact, axis=1)[:, ::-1][:, :want], atol=1e-5)


def test_compaction_keeps_rows_and_drops_masked_vectors() -> None:
    vectors = clustered(300, DIM, 4, seed=5)
    index = _index("hnsw", vectors)
    masked = np.arange(0, 300, 2, dtype=np.int64)
    fresh = compacted(index, "hnsw", PARAMS["hnsw"], masked)
    assert fresh.ntotal == 150
    live = np.arange(1, 300, 2)
    _, rows = search_rows(fresh, "hnsw", vectors[live[:20]], 1, None, np.empty(0, np.int64), PARAMS["hnsw"])
    assert rows[:, 0].tolist() == live[:20].tolist()  # each live vector still finds itself, by its row
    add_rows(fresh, clustered(5, DIM, 1, seed=6), 300)
    assert fresh.ntotal == 155
