"""Exact top-k search by inner product in numpy, as a run `{query_id: {doc_id: score}}`, and the
same run from an index folder. Plain arrays in, plain dicts out: what the evaluators search with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from embedkit.errors import InputError

SEARCH_CHUNK = 16384  # documents scored at once; a 1024 x 16384 float32 block is 64 MiB
QUERY_BLOCK = 1024  # queries scored at once


def exact_search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    k: int,
    query_ids: Sequence[str],
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """The top `k` documents of each query by inner product, as a run `{query_id: {doc_id: score}}`.

    Scores are computed in blocks (`QUERY_BLOCK` x `SEARCH_CHUNK`) to bound memory. Among equal
    scores the larger doc id wins, so the chosen set matches the order the metrics rank by.
    `exclude[i]`, if given, is a doc id that query i must not retrieve (BEIR's identical ids).
    """
    queries = _matrix(query_vectors, "query vectors")
    docs = _matrix(doc_vectors, "document vectors")
    if queries.shape[1] != docs.shape[1]:
        raise InputError(f"query vectors have dim {queries.shape[1]}, document vectors {docs.shape[1]}")
    if len(doc_ids) != len(docs) or len(query_ids) != len(queries):
        raise InputError("exact_search: one id per vector is needed")
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    # tie_rank[j]: doc j's position when ids are sorted descending; lower wins a tie.
    tie_rank = np.empty(len(doc_ids), dtype=np.int64)
    tie_rank[sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)] = np.arange(len(doc_ids))
    position = {doc: j for j, doc in enumerate(doc_ids)}
    excluded = np.array(
        [position.get(d, -1) for d in exclude] if exclude is not None else [-1] * len(queries)
    )
    run: dict[str, dict[str, float]] = {}
    for q0 in range(0, len(queries), QUERY_BLOCK):
        block = queries[q0 : q0 + QUERY_BLOCK]
        best_scores = np.empty((len(block), 0), dtype=np.float32)
        best_docs = np.empty((len(block), 0), dtype=np.int64)
        for d0 in range(0, len(docs), SEARCH_CHUNK):
            scores = block @ docs[d0 : d0 + SEARCH_CHUNK].T  # (Q, D)
            offsets = excluded[q0 : q0 + len(block)] - d0  # excluded doc's column in this chunk
            rows = np.flatnonzero((offsets >= 0) & (offsets < scores.shape[1]))
            scores[rows, offsets[rows]] = -np.inf
            candidates = np.broadcast_to(np.arange(d0, d0 + scores.shape[1]), scores.shape)
            best_scores = np.concatenate([best_scores, scores], axis=1)
            best_docs = np.concatenate([best_docs, candidates], axis=1)
            best_scores, best_docs = _top_k(best_scores, best_docs, tie_rank, k)
        for r in range(len(block)):
            keep = np.isfinite(best_scores[r])
            run[query_ids[q0 + r]] = {
                doc_ids[j]: float(s) for j, s in zip(best_docs[r][keep], best_scores[r][keep], strict=True)
            }
    return run


def _top_k(
    scores: np.ndarray, docs: np.ndarray, tie_rank: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best (score descending, then tie_rank ascending), in that order."""
    if scores.shape[1] > k:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
        # argpartition picks among scores equal to the k-th arbitrarily: redo those rows exactly.
        for r in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k):
            candidates = np.flatnonzero(scores[r] >= kth[r])
            order = np.lexsort((tie_rank[docs[r, candidates]], -scores[r, candidates]))
            part[r] = candidates[order[:k]]
        scores = np.take_along_axis(scores, part, axis=1)
        docs = np.take_along_axis(docs, part, axis=1)
    order = np.lexsort((tie_rank[docs], -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(docs, order, axis=1)


def _matrix(vectors: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D array, got shape {array.shape}")
    return np.ascontiguousarray(array)


def index_search(
    index: Any,
    query_vectors: np.ndarray,
    query_ids: Sequence[str],
    k: int,
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """A run from a search index; one extra hit is fetched per query so that dropping its own id leaves k."""
    scores, ids = index.search(query_vectors, k + 1 if exclude is not None else k)
    run: dict[str, dict[str, float]] = {}
    for i, query_id in enumerate(query_ids):
        hits = [
            (doc, float(s)) for doc, s in zip(ids[i], scores[i], strict=True) if doc is not None and doc != ""
        ]
        if exclude is not None:
            hits = [(doc, s) for doc, s in hits if doc != exclude[i]]
        run[query_id] = dict(hits[:k])
    return run


def lexical_run(
    rankings: Sequence[Sequence[tuple[int, float]]],
    doc_ids_of_rows: Any,  # row -> doc id: a list, or a mapping
    query_ids: Sequence[str],
    k: int,
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """A run from BM25 rankings of rows (`embedkit.index.lexical.search_lexical`), own ids dropped."""
    run: dict[str, dict[str, float]] = {}
    for i, query_id in enumerate(query_ids):
        hits = [(doc_ids_of_rows[row], score) for row, score in rankings[i]]
        if exclude is not None:
            hits = [(doc, s) for doc, s in hits if doc != exclude[i]]
        run[query_id] = dict(hits[:k])
    return run


def fuse_runs(
    dense: dict[str, dict[str, float]],
    lexical: dict[str, dict[str, float]],
    k: int,
    method: str,
    alpha: float,
) -> dict[str, dict[str, float]]:
    """Each query's dense and lexical hits fused (`embedkit.index.fusion.fuse`), as a run of fused scores."""
    from embedkit.index.fusion import fuse

    run: dict[str, dict[str, float]] = {}
    for query_id in dense.keys() | lexical.keys():
        ranked_dense = sorted(dense.get(query_id, {}).items(), key=lambda hit: -hit[1])
        ranked_lexical = sorted(lexical.get(query_id, {}).items(), key=lambda hit: -hit[1])
        names = list(dict.fromkeys(doc for doc, _ in ranked_dense + ranked_lexical))
        number = {doc: i for i, doc in enumerate(names)}  # fusion works on integer rows
        fused = fuse(
            [(number[d], s) for d, s in ranked_dense],
            [(number[d], s) for d, s in ranked_lexical],
            k,
            method=method,
            alpha=alpha,
        )
        run[query_id] = {names[hit.row]: hit.score for hit in fused}
    return run


def feedback_run(
    dense: dict[str, dict[str, float]],
    lexical: dict[str, dict[str, float]],
    query_ids: Sequence[str],
    query_vectors: np.ndarray,
    vectors_of: Callable[[list[str]], np.ndarray],  # doc ids -> their stored vectors
    search: Callable[[np.ndarray, list[str]], dict[str, dict[str, float]]],  # vectors, query ids -> run
    alpha: float,
) -> dict[str, dict[str, float]]:
    """The `prf` fusion as a run (`embedkit.index.fusion`, as `SearchIndex.search_text` does it).

    Each query's dense and lexical hits fused by z-score at `alpha`; the query vector moved toward
    its top `PRF_DOCS` documents; `search` ranks the documents again with the moved vectors. A
    query without lexical hits keeps its dense run.
    """
    from embedkit.index.fusion import PRF_DOCS, feedback_query

    first = fuse_runs(dense, lexical, PRF_DOCS, "zscore", alpha)
    moved_ids = [q for q in query_ids if lexical.get(q)]
    if not moved_ids:
        return dict(dense)
    top = {q: sorted(first[q].items(), key=lambda hit: -hit[1]) for q in moved_ids}
    feedback_ids = sorted({doc for q in moved_ids for doc, _ in top[q]})
    stored = dict(zip(feedback_ids, vectors_of(feedback_ids), strict=True))
    position = {q: i for i, q in enumerate(query_ids)}
    moved = np.stack(
        [
            feedback_query(query_vectors[position[q]], np.stack([stored[d] for d, _ in top[q]]))
            for q in moved_ids
        ]
    )
    return {**dense, **search(moved, moved_ids)}
