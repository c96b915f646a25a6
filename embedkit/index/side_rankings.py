"""Each search side's rankings over a loaded index, and their fusion into hits.

`SearchIndex.search_text` asks for rankings of rows; in an index of passages
(`embedkit.index.passages`) they are rankings of documents instead: each side fetches enough
passage rows that `depth` distinct documents come back (`rank_documents`), ranks a document by its
best passage, and records each document's best row (`best`), which becomes the hit's row. A
metadata filter (`SearchIndex.restriction`) is applied inside each side (FAISS and BM25 search
only the allowed rows), so a filtered search fetches and collapses only rows that pass it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.index.fusion import PRF_DOCS, feedback_query, fuse
from embedkit.index.hits import Hit
from embedkit.index.passages import fetch_size, rank_documents

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder
    from embedkit.index.search import SearchIndex

Ranking = list[tuple[int, float]]  # (row, or document in an index of passages; score), best first


def _fetch_size(index: SearchIndex, depth: int, allowed: Any) -> int:
    """Rows each side fetches for `depth` documents (`depth` itself without passages)."""
    if not index.passages:
        return depth
    return fetch_size(depth, _searchable(index, allowed), index.document_count)


def _searchable(index: SearchIndex, allowed: Any) -> int:
    """The vector rows a search can reach: all live ones, or those a filter allows."""
    return len(index) if allowed is None else min(len(index), len(allowed))


def _by_document(
    index: SearchIndex,
    fetch: Callable[[int], list[Ranking]],
    depth: int,
    best: list[dict[int, int]] | None,
    allowed: Any,
    first: list[Ranking] | None = None,
) -> list[Ranking]:
    size = _fetch_size(index, depth, allowed)
    total = _searchable(index, allowed)
    return rank_documents(fetch, depth, size, total, index.store.documents_of_rows, best, first)


def dense_rankings(
    index: SearchIndex,
    vectors: np.ndarray,
    depth: int,
    best: list[dict[int, int]] | None = None,
    *,
    allowed: Any = None,
) -> list[Ranking]:
    """Each query's best `depth` rows (documents, in an index of passages) by cosine, among `allowed`."""

    def fetch(size: int) -> list[Ranking]:
        scores, rows = index._search_rows(vectors, size, restriction=allowed)  # (Q, size) each
        return [
            [(int(r), float(v)) for r, v in zip(row, vals, strict=True) if r >= 0]
            for row, vals in zip(rows.tolist(), scores.tolist(), strict=True)
        ]

    return _by_document(index, fetch, depth, best, allowed) if index.passages else fetch(depth)


def start_lexical(index: SearchIndex, items: list[str], depth: int, allowed: Any):  # -> a thunk
    """The BM25 side's first fetch, for `lexical_rankings` to finish (run on a worker by hybrid)."""
    size = _fetch_size(index, depth, allowed)
    return lambda: index.store.search_lexical(items, size, allowed)


def lexical_rankings(
    index: SearchIndex,
    items: list[str],
    depth: int,
    best: list[dict[int, int]],
    first: list[Ranking],
    *,
    allowed: Any = None,
) -> list[Ranking]:
    """BM25 rankings (`first`: the fetch `start_lexical` made), of documents in an index of passages."""
    if not index.passages:
        return first
    fetch = lambda n: index.store.search_lexical(items, n, allowed)  # noqa: E731
    return _by_document(index, fetch, depth, best, allowed, first)


def rank(mode: str, dense: Ranking, lexical: Ranking, k: int, fusion: str, alpha: float) -> list[Hit]:
    """One query's hits (ids not yet filled) from its two rankings, by `mode` and `fusion`."""
    if mode == "lexical":  # no lexical terms: no hits, as asked (never dense ones instead)
        return [Hit("", s, r, lexical_score=s) for r, s in lexical[:k]]
    if mode == "dense" or not lexical:  # hybrid with no lexical terms: the dense ranking stands
        return [Hit("", s, r, dense_score=s) for r, s in dense[:k]]
    return [
        Hit("", f.score, f.row, dense_score=f.dense_score, lexical_score=f.lexical_score)
        for f in fuse(dense, lexical, k, method=fusion, alpha=alpha)
    ]


def feedback_rankings(
    index: SearchIndex,
    vectors: np.ndarray,
    dense: list[Ranking],
    lexical: list[Ranking],
    k: int,
    alpha: float,
    encoder: Encoder,
    best: list[dict[int, int]],
    lexical_best: list[dict[int, int]],
    *,
    allowed: Any = None,
) -> list[list[Hit]]:
    """prf (`embedkit.index.fusion`): the dense side searched again with each query's feedback vector.

    Scores are the feedback query's cosines; `dense_score` / `lexical_score` are the first
    searches' scores of the rows they returned. In an index of passages the rankings are of
    documents, and a feedback document's vector is its best passage's (the dense side's best,
    else the lexical side's). The second search keeps the filter of the first.
    """
    firsts = [
        [f.row for f in fuse(d, x, PRF_DOCS, alpha=alpha)] if x else []
        for d, x in zip(dense, lexical, strict=True)
    ]
    if index.passages:
        firsts = [
            [b.get(doc, x.get(doc, -1)) for doc in docs]
            for docs, b, x in zip(firsts, best, lexical_best, strict=True)
        ]
    feedback_rows = sorted({row for rows in firsts for row in rows})
    stored = dict(zip(feedback_rows, index.vectors_of_rows(feedback_rows, encoder), strict=True))
    moved = np.stack(
        [
            feedback_query(vector, np.stack([stored[r] for r in rows])) if rows else vector
            for vector, rows in zip(vectors, firsts, strict=True)
        ]
    )
    again_best: list[dict[int, int]] = []
    again = dense_rankings(index, moved, k, again_best if index.passages else None, allowed=allowed)
    for q, rows in enumerate(again_best):  # the final ranking's best passages, over the first's
        best[q].update(rows)
    ranked = []
    for final, d, x, rows in zip(again, dense, lexical, firsts, strict=True):
        if not rows:  # no lexical hits: the dense ranking stands
            ranked.append([Hit("", s, r, dense_score=s) for r, s in d[:k]])
            continue
        dense_of, lexical_of = dict(d), dict(x)
        ranked.append(
            [Hit("", s, r, dense_score=dense_of.get(r), lexical_score=lexical_of.get(r)) for r, s in final]
        )
    return ranked
