"""Exact top-k by inner product: the one implementation every exact search uses.

The tie rule, everywhere: a higher score first; among equal scores, the lower tie rank first. A
caller that ranks documents by id (the in-memory store that evaluation searches, whose metrics rank
ties as trec_eval does) passes `tie_ranks(doc_ids)`; every other caller leaves `tie_rank` out and
ties go to the lower row. Used by the in-memory store (`embedkit.evaluation.memory_store`), an index
folder's exact fallbacks (`embedkit.index.local_store`), `adapt`'s top-k overlap, and the
benchmarks' exact references (`exact_top_k_of_blocks`: vectors read a block at a time).

Scores are computed in blocks (`QUERY_BLOCK` x `SEARCH_CHUNK`) so that memory stays bounded
whatever the number of documents; within a block `argpartition` keeps the work linear, and the rows
where it had to choose among scores equal to the k-th are redone exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from embedkit.errors import InputError

SEARCH_CHUNK = 16384  # documents scored at once; a 1024 x 16384 float32 block is 64 MiB
QUERY_BLOCK = 1024  # queries scored at once


def tie_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Each document's position when ids are sorted descending: the lower wins a tie in score
    (trec_eval ranks equal scores by document id, descending)."""
    tie_rank = np.empty(len(doc_ids), dtype=np.int64)
    tie_rank[sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)] = np.arange(len(doc_ids))
    return tie_rank


def exact_top_k(
    queries: np.ndarray,
    docs: np.ndarray,
    k: int,
    tie_rank: np.ndarray | None = None,
    exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows), each (q, min(k, len(docs))), of each query's best documents by inner
    product, best first (the module's tie rule). `tie_rank[row]` breaks ties (None: the row).
    `exclude[i]`, if given, is a row query i must not retrieve (-1: none); its score is -inf."""
    if queries.ndim != 2 or docs.ndim != 2:
        raise InputError(f"exact search takes 2-D arrays, got {queries.shape} and {docs.shape}")
    if queries.shape[1] != docs.shape[1]:
        raise InputError(f"query vectors have dim {queries.shape[1]}, document vectors {docs.shape[1]}")
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    excluded = exclude if exclude is not None else np.full(len(queries), -1)
    width = min(k, len(docs))
    out_scores = np.empty((len(queries), width), dtype=np.result_type(queries, docs, np.float32))
    out_rows = np.empty((len(queries), width), dtype=np.int64)
    for q0 in range(0, len(queries), QUERY_BLOCK):
        block = queries[q0 : q0 + QUERY_BLOCK]
        best_scores = np.empty((len(block), 0), dtype=out_scores.dtype)
        best_rows = np.empty((len(block), 0), dtype=np.int64)
        for d0 in range(0, len(docs), SEARCH_CHUNK):
            scores = block @ docs[d0 : d0 + SEARCH_CHUNK].T  # (Q, D)
            offsets = excluded[q0 : q0 + len(block)] - d0  # the excluded row's column in this chunk
            hit = np.flatnonzero((offsets >= 0) & (offsets < scores.shape[1]))
            scores[hit, offsets[hit]] = -np.inf
            columns = np.broadcast_to(np.arange(d0, d0 + scores.shape[1]), scores.shape)
            best_scores = np.concatenate([best_scores, scores], axis=1)
            best_rows = np.concatenate([best_rows, columns], axis=1)
            best_scores, best_rows = top_k(best_scores, best_rows, k, tie_rank)
        out_scores[q0 : q0 + len(block)] = best_scores
        out_rows[q0 : q0 + len(block)] = best_rows
    return out_scores, out_rows


def exact_top_k_of_blocks(
    queries: np.ndarray, blocks: Iterable[np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """`exact_top_k` over documents handed over a block at a time (a memory-mapped file read in
    slices, as faiss contrib's `knn_ground_truth` takes a database iterator): rows count on across
    the blocks, ties go to the lower row. Scores are computed in the wider dtype of the queries and
    a block (float64 where either is), as in `exact_top_k`."""
    best: tuple[np.ndarray, np.ndarray] | None = None
    start = 0
    for block in blocks:
        scores, rows = exact_top_k(queries, block, k)
        rows += start
        start += len(block)
        if best is not None:
            scores, rows = top_k(np.concatenate([best[0], scores], 1), np.concatenate([best[1], rows], 1), k)
        best = scores, rows
    if best is None:
        raise InputError("exact search over no blocks of documents")
    return best


def top_k(
    scores: np.ndarray, rows: np.ndarray, k: int, tie_rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each line's k best of `scores` (q, n) and their `rows` (q, n), in the module's order."""
    ranks = (lambda r: r) if tie_rank is None else (lambda r: tie_rank[r])
    if scores.shape[1] > k:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
        # argpartition picks among scores equal to the k-th arbitrarily: redo those lines exactly.
        for line in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k):
            candidates = np.flatnonzero(scores[line] >= kth[line])
            order = np.lexsort((ranks(rows[line, candidates]), -scores[line, candidates]))
            part[line] = candidates[order[:k]]
        scores = np.take_along_axis(scores, part, axis=1)
        rows = np.take_along_axis(rows, part, axis=1)
    order = np.lexsort((ranks(rows), -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)
