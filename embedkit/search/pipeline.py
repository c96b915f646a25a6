"""The search pipeline: queries in, each query's hits with their documents out, over any `SearchStore`.

The one implementation of search: `embedkit search`, `/search` and the search page, the Python API
(`SearchIndex.search_text`), `eval retrieval`, the fusion calibration and `adapt` call `search`.
Its stages, in order, each a function below:

1. the filter: `SearchRequest.where` compiled by the store, so each side searches only the
   documents that pass it and fusion sees no other;
2. the sides: BM25 (`lexical_side`, on a worker thread in hybrid mode while the model embeds
   the queries) and the nearest vectors (`dense_side`); in an index of passages each side's rows
   are collapsed to documents, each ranked by its best passage (`by_document`); a document a
   query must not find (`SearchRequest.exclude`: BEIR's identical ids) is dropped from each side;
3. fusion: `embedkit.search.fusion`'s methods, or `prf` (`feedback_ranking`): the dense side
   searched again with each query moved toward its top fused documents' stored vectors;
4. documents: ids, documents, best passages (`with_documents`) and a snippet for every hit, the
   window of its text that best answers the query (`embedkit.search.snippets`);
5. re-ranking: `SearchRequest.rerank`, where a re-ranker plugs in (none by default).

A query with no lexical terms (stopwords, punctuation) is searched dense only in hybrid mode and
finds nothing in lexical mode. Queries are embedded with the index's query prefix
(`embedkit.encode.prefixes`); BM25 sees them as given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.document import Passage
from embedkit.search.fusion import PRF_DOCS, bounded_k, feedback_query, fuse
from embedkit.search.hits import Hit, with_documents
from embedkit.search.snippets import snippets

if TYPE_CHECKING:
    from embedkit.data.document import TextSpan
    from embedkit.encode.prefixes import Prefixes
    from embedkit.encode.protocol import Encoder
    from embedkit.search.request import SearchRequest
    from embedkit.search.store import Allowed, Ranking, SearchStore


@dataclass
class Side:
    """One side's rankings for each query: of rows, or of document numbers in a store of passages,
    where `best[q]` gives each ranked document's best row."""

    rankings: list[Ranking]
    best: list[dict[int, int]]


def search(
    store: SearchStore[Allowed],
    queries: Sequence[str],
    encoder: Encoder | None,
    request: SearchRequest,
    prefixes: Prefixes,
) -> list[list[Hit]]:
    """Each query's hits, best first, as `request` (resolved: `SearchRequest.resolved`) asks.

    `encoder` embeds the queries (None only in lexical mode); `prefixes` are the index's.
    """
    items = list(queries)
    held = store.document_count()  # k beyond it is every document (`bounded_k`), never k places
    depth = bounded_k(request.depth or request.k, held)
    request = replace(request, k=bounded_k(request.k, held), depth=depth)
    allowed = store.compile_filter(request.where) if request.where is not None else None
    depth, mode = int(request.depth or request.k), request.mode
    exclude = list(request.exclude) if request.exclude is not None else None
    dense, lexical = (
        Side([[] for _ in items], [{} for _ in items]),
        Side([[] for _ in items], [{} for _ in items]),
    )
    vectors = np.empty((len(items), store.dim), np.float32)  # the query vectors, where the model runs
    if mode == "lexical":
        lexical = lexical_side(store, items, depth, allowed, exclude)
    else:
        # hybrid: BM25 runs on a second thread while the model encodes the queries (both leave
        # the GIL), so the lexical side costs little of a query's time
        size = _fetch_size(store, depth + (exclude is not None), allowed)
        pending = (
            _lexical_thread().submit(store.search_lexical, items, size, allowed) if mode == "hybrid" else None
        )
        assert encoder is not None, "dense and hybrid search embed their queries"
        vectors = encoder.encode(prefixes.queries(items), normalize=True).reshape(len(items), -1)
        dense = dense_side(store, vectors, depth, allowed, exclude)
        if pending is not None:
            lexical = lexical_side(store, items, depth, allowed, exclude, first=pending.result())
    if mode == "hybrid" and request.fusion == "prf":
        assert encoder is not None, "hybrid search embeds its queries"
        feedback = _Feedback(store, encoder, prefixes, allowed, exclude)
        ranked = feedback.rankings(vectors, dense, lexical, request.k, float(request.alpha or 0.0))
    else:
        ranked = [
            rank(str(mode), d, x, request.k, str(request.fusion), float(request.alpha or 0.0))
            for d, x in zip(dense.rankings, lexical.rankings, strict=True)
        ]
    hits = with_store_documents(
        store, ranked, items if request.snippets else None, request.passages, dense, lexical
    )
    return request.rerank(items, hits) if request.rerank is not None else hits


# --- the sides -----------------------------------------------------------------------------------


def dense_side(
    store: SearchStore[Allowed],
    vectors: np.ndarray,
    depth: int,
    allowed: Allowed | None,
    exclude: list[str] | None = None,
) -> Side:
    """Each query vector's best `depth` rows by cosine (documents, in a store of passages)."""
    wanted = depth + (exclude is not None)  # one more, for the document a query must not find
    if store.passages:
        side = by_document(store, lambda n: store.search_dense(vectors, n, allowed), wanted, allowed)
    else:
        rankings = store.search_dense(vectors, wanted, allowed)
        side = Side(rankings, [{} for _ in rankings])
    return _without(store, side, exclude, depth)


def lexical_side(
    store: SearchStore[Allowed],
    texts: list[str],
    depth: int,
    allowed: Allowed | None,
    exclude: list[str] | None = None,
    first: list[Ranking] | None = None,
) -> Side:
    """Each text's best `depth` rows by BM25 (documents, in a store of passages); `first` is the
    fetch of `_fetch_size` rows already made (by the worker thread)."""
    wanted = depth + (exclude is not None)
    if store.passages:
        side = by_document(store, lambda n: store.search_lexical(texts, n, allowed), wanted, allowed, first)
    else:
        rankings = first if first is not None else store.search_lexical(texts, wanted, allowed)
        side = Side(rankings, [{} for _ in rankings])
    return _without(store, side, exclude, depth)


def _fetch_size(store: SearchStore[Allowed], depth: int, allowed: Allowed | None) -> int:
    """Rows a side fetches first for `depth` documents: `depth` itself without passages, else
    twice the mean passages a document, times `depth` (`by_document` fetches more where short)."""
    if not store.passages:
        return depth
    vectors = store.reachable(allowed)
    per_document = -(-vectors // max(1, store.document_count()))
    return max(1, min(vectors, depth * per_document * 2))


def by_document(
    store: SearchStore[Allowed],
    fetch: Callable[[int], list[Ranking]],
    depth: int,
    allowed: Allowed | None,
    first: list[Ranking] | None = None,
) -> Side:
    """Rankings of passage rows as rankings of documents by their best passage, `depth` each.

    `fetch(n)` gives each query's best `n` rows; `first` is its answer for `_fetch_size` when
    already fetched. Rows are fetched again, 4x as many, while a query's rows came from fewer
    than `depth` documents and more rows exist. A document's score is its best passage's.
    """
    total = store.reachable(allowed)
    size = _fetch_size(store, depth, allowed)
    rankings = first if first is not None else fetch(size)
    while True:
        number_of = store.document_numbers(sorted({row for ranking in rankings for row, _ in ranking}))
        collapsed = [_best_per_document(ranking, number_of) for ranking in rankings]
        short = any(len(d) < depth and len(r) >= size for d, r in zip(collapsed, rankings, strict=True))
        if not short or size >= total:
            break
        size = min(total, size * 4)
        rankings = fetch(size)
    best = [{doc: row for doc, row, _ in docs[:depth]} for docs in collapsed]
    return Side([[(doc, score) for doc, _, score in docs[:depth]] for docs in collapsed], best)


def _best_per_document(ranking: Ranking, number_of: dict[int, int]) -> list[tuple[int, int, float]]:
    """(document, its best row, that row's score) in the order of `ranking`, each document once."""
    seen: dict[int, tuple[int, int, float]] = {}
    for row, score in ranking:
        doc = number_of.get(int(row))
        if doc is not None and doc not in seen:
            seen[doc] = (doc, int(row), float(score))
    return list(seen.values())


def _without(store: SearchStore[Any], side: Side, exclude: list[str] | None, depth: int) -> Side:
    """The side without each query's excluded document, cut to `depth`."""
    if exclude is None:
        return side

    def row(q: int, key: int) -> int:  # a ranked key's row: its best passage's in a store of passages
        return side.best[q].get(key, key) if store.passages else key

    held = store.held_at(
        sorted({row(q, key) for q, ranking in enumerate(side.rankings) for key, _ in ranking})
    )
    kept = [
        [(key, score) for key, score in ranking if held[row(q, key)].id != exclude[q]][:depth]
        for q, ranking in enumerate(side.rankings)
    ]
    best = [
        {key: b[key] for key, _ in ranking if key in b} for ranking, b in zip(kept, side.best, strict=True)
    ]
    return Side(kept, best)


# --- fusion --------------------------------------------------------------------------------------


def rank(mode: str, dense: Ranking, lexical: Ranking, k: int, fusion: str, alpha: float) -> list[Hit]:
    """One query's hits (ids not yet filled) from its two rankings, by `mode` and `fusion` (not prf)."""
    if mode == "lexical":  # no lexical terms: no hits, as asked (never dense ones instead)
        return [Hit("", s, r, lexical_score=s) for r, s in lexical[:k]]
    if mode == "dense" or not lexical:  # hybrid with no lexical terms: the dense ranking stands
        return [Hit("", s, r, dense_score=s) for r, s in dense[:k]]
    return [
        Hit("", f.score, f.row, dense_score=f.dense_score, lexical_score=f.lexical_score)
        for f in fuse(dense, lexical, k, method=fusion, alpha=alpha)
    ]


@dataclass
class _Feedback:
    """prf (`embedkit.search.fusion`): the dense side searched again with each query's feedback vector."""

    store: SearchStore[Any]
    encoder: Encoder
    prefixes: Prefixes
    allowed: Any  # the store's allowed set (`SearchStore.compile_filter`), or None
    exclude: list[str] | None

    def rankings(
        self, vectors: np.ndarray, dense: Side, lexical: Side, k: int, alpha: float
    ) -> list[list[Hit]]:
        """Scores are the feedback query's cosines; `dense_score` / `lexical_score` are the first
        searches' scores of the rows they returned. In an index of passages a feedback document's
        vector is its best passage's (the dense side's best, else the lexical side's). A query
        without lexical hits keeps its dense ranking; only the others are searched again."""
        firsts = [
            [f.row for f in fuse(d, x, PRF_DOCS, alpha=alpha)] if x else []
            for d, x in zip(dense.rankings, lexical.rankings, strict=True)
        ]
        if self.store.passages:
            firsts = [
                [b.get(doc, x.get(doc, -1)) for doc in docs]
                for docs, b, x in zip(firsts, dense.best, lexical.best, strict=True)
            ]
        moved = [q for q, rows in enumerate(firsts) if rows]
        again = self._searched_again(vectors, firsts, moved, k)
        ranked: list[list[Hit]] = []
        for q, (d, x) in enumerate(zip(dense.rankings, lexical.rankings, strict=True)):
            if q not in again:  # no lexical hits: the dense ranking stands
                ranked.append([Hit("", s, r, dense_score=s) for r, s in d[:k]])
                continue
            dense_of, lexical_of = dict(d), dict(x)
            final, best = again[q]
            dense.best[q].update(best)  # the final ranking's best passages, over the first's
            ranked.append(
                [
                    Hit("", s, r, dense_score=dense_of.get(r), lexical_score=lexical_of.get(r))
                    for r, s in final
                ]
            )
        return ranked

    def _searched_again(
        self, vectors: np.ndarray, firsts: list[list[int]], moved: list[int], k: int
    ) -> dict[int, tuple[Ranking, dict[int, int]]]:
        """Query -> (its feedback query's ranking, that ranking's best rows), for the `moved` ones."""
        if not moved:
            return {}
        rows = sorted({row for q in moved for row in firsts[q]})
        stored = dict(zip(rows, stored_vectors(self.store, rows, self.encoder, self.prefixes), strict=True))
        queries = np.stack(
            [feedback_query(vectors[q], np.stack([stored[r] for r in firsts[q]])) for q in moved]
        )
        exclude = [self.exclude[q] for q in moved] if self.exclude is not None else None
        side = dense_side(self.store, queries, k, self.allowed, exclude)
        return {q: (ranking, best) for q, ranking, best in zip(moved, side.rankings, side.best, strict=True)}


def stored_vectors(
    store: SearchStore[Any], rows: Sequence[int], encoder: Encoder, prefixes: Prefixes
) -> np.ndarray:
    """The stored vectors of `rows`, else (`embedded_rows`) what the rows hold embedded again."""
    vectors = store.vectors_of_rows(rows)
    return vectors if vectors is not None else embedded_rows(store, rows, encoder, prefixes)


def embedded_rows(
    store: SearchStore[Any], rows: Sequence[int], encoder: Encoder, prefixes: Prefixes
) -> np.ndarray:
    """What each row holds (its passage, in an index of passages) embedded as it was indexed: the
    vectors of a store that cannot read them back (a GPU index, an IVF index without its map)."""
    held = store.held_at(rows)
    texts = prefixes.passages([held[r].full_text if r in held else "" for r in rows])
    return encoder.encode(texts, normalize=True).reshape(len(texts), -1)


# --- documents -----------------------------------------------------------------------------------


def with_store_documents(
    store: SearchStore[Any],
    ranked: list[list[Hit]],
    queries: Sequence[str] | None,
    passages: bool,
    dense: Side,
    lexical: Side,
) -> list[list[Hit]]:
    """The hits with ids and documents (`with_documents`), read from the store; snippets for
    `queries` where given (`embedkit.search.snippets`). In an index of passages a hit's row
    becomes its document's best passage's (the ranking's side first: the model's, by meaning,
    where it scored the document), and its snippet is the best window of that passage."""
    if store.passages:
        ranked = [
            [replace(h, row=b.get(h.row, x.get(h.row, -1))) for h in hits]
            for hits, b, x in zip(ranked, dense.best, lexical.best, strict=True)
        ]
    held = store.held_at(sorted({h.row for hits in ranked for h in hits}))
    hits = with_documents(ranked, held, store.passages, passages)
    if queries is None:
        return hits
    with_snippets = []
    for query, q_hits in zip(queries, hits, strict=True):
        sources = [held.get(h.row) for h in q_hits]
        titles = [source.title if source is not None else "" for source in sources]
        made = snippets(query, [_quoted(s) for s in sources], store, titles, [_cut(s) for s in sources])
        with_snippets.append([replace(h, snippet=s) for h, s in zip(q_hits, made, strict=True)])
    return with_snippets


def _quoted(source: TextSpan | None) -> str:
    """What a hit's snippet quotes: its document's (or passage's) text, else its title."""
    if source is None:
        return ""
    return source.text if source.text.strip() else source.title


def _cut(source: TextSpan | None) -> tuple[bool, bool]:
    """Whether a passage was cut from its document's text at its start and at its end."""
    if not isinstance(source, Passage):
        return False, False
    return source.start > 0, source.end < len(source.document.text)


@functools.cache
def _lexical_thread() -> ThreadPoolExecutor:
    """The worker that runs hybrid search's BM25 side beside the query encoding (one per process)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedkit-bm25")
