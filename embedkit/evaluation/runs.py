"""Runs: each query's retrieved documents and scores, `{query_id: {doc_id: score}}`, the form the
metrics score (`embedkit.evaluation.metrics`). Made from what a search returned; the searching is
the pipeline's (`embedkit.search.pipeline`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from embedkit.index.search import SearchIndex
    from embedkit.search.hits import Hit

Run = dict[str, dict[str, float]]  # query id -> doc id -> score


def run_of_hits(query_ids: Sequence[str], hits: Sequence[Sequence[Hit]]) -> Run:
    """Each query's hits (best first, one per document) as a run."""
    return {
        query_id: {h.id: float(h.score) for h in found}
        for query_id, found in zip(query_ids, hits, strict=True)
    }


def index_search(
    index: SearchIndex,
    query_vectors: np.ndarray,
    query_ids: Sequence[str],
    k: int,
    exclude: Sequence[str] | None = None,
) -> Run:
    """The run of `SearchIndex.search` (dense); one extra hit is fetched per query so that dropping
    its own id (`exclude[i]`) leaves k."""
    scores, ids = index.search(query_vectors, k + 1 if exclude is not None else k)
    run: Run = {}
    for i, query_id in enumerate(query_ids):
        hits = [
            (doc, float(s)) for doc, s in zip(ids[i], scores[i], strict=True) if doc is not None and doc != ""
        ]
        if exclude is not None:
            hits = [(doc, s) for doc, s in hits if doc != exclude[i]]
        run[query_id] = dict(hits[:k])
    return run
