"""Search results: `Hit`, its JSON form (`hit_record`), and what a ranking of rows becomes a hit with.

`with_documents` turns the rankings `SearchIndex.search_text` computed into hits that carry their
documents, and on request their best passage and a snippet. In an index of passages the rankings
are of document numbers (`embedkit.index.passages`), and each becomes the row of its best passage
on the ranking's own side (dense, else lexical); the snippet quotes the passage BM25 scored best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.index.docstore import DocStore
    from embedkit.index.passages import Passage


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its score, its FAISS row, and each side's own score.

    `score` is the ranking's score: the cosine similarity (dense), BM25 (lexical), or the fused
    score (hybrid). `dense_score` and `lexical_score` are None where that side did not find it.
    """

    id: str
    score: float
    row: int
    document: Document | None = None  # filled by `search_text`
    dense_score: float | None = None
    lexical_score: float | None = None
    snippet: str | None = None  # the matched terms in <b>, HTML (`search_text(snippets=True)`)
    passage: Passage | None = None  # the best passage, in an index of passages (`search_text(passages=True)`)


def hit_record(rank: int, hit: Hit) -> dict[str, Any]:
    """One hit as JSON, the same for `embedkit search --json` and the server's `/search`.

    `dense_score` and `lexical_score` are always present (null where that side did not return the
    hit); `snippet` where one was made; `passage` (its text, and its start and end characters in
    `text`) where passages were asked for; `title`, `text` and `metadata` where the document is known.
    """
    record: dict[str, Any] = {"rank": rank, "id": hit.id, "score": float(hit.score)}
    record["dense_score"] = None if hit.dense_score is None else float(hit.dense_score)
    record["lexical_score"] = None if hit.lexical_score is None else float(hit.lexical_score)
    if hit.snippet is not None:
        record["snippet"] = hit.snippet
    if hit.passage is not None:
        record["passage"] = {"text": hit.passage.text, "start": hit.passage.start, "end": hit.passage.end}
    if hit.document is not None:
        record.update(title=hit.document.title, text=hit.document.text, metadata=hit.document.metadata or {})
    return record


def with_documents(
    store: DocStore,
    ranked: list[list[Hit]],
    *,
    queries: Sequence[str] | None = None,  # snippets for these queries' hits (None: no snippets)
    passages: bool = False,  # give each hit its best passage
    best: list[dict[int, int]] | None = None,  # in an index of passages: document -> best row
    lexical_best: list[dict[int, int]] | None = None,  # and the lexical side's best rows
) -> list[list[Hit]]:
    """Each query's hits with `id` and `document` set (and `passage`, `snippet` where asked)."""
    lexical_best = lexical_best or [{} for _ in ranked]
    snippet_rows = [[x.get(h.row) for h in hits] for hits, x in zip(ranked, lexical_best, strict=True)]
    if best is not None:
        ranked = [
            [replace(h, row=b.get(h.row, x.get(h.row, -1))) for h in hits]
            for hits, b, x in zip(ranked, best, lexical_best, strict=True)
        ]
    found = sorted({h.row for hits in ranked for h in hits})
    docs = dict(zip(found, store.by_rows(found), strict=True))
    results = [[replace(h, id=docs[h.row].id, document=docs[h.row]) for h in hits] for hits in ranked]
    held: dict[int, Passage] = {}
    if best is not None and (passages or queries is not None):
        held = store.passages_of_rows(found + [r for rows in snippet_rows for r in rows if r is not None])
        if passages:
            results = [[replace(h, passage=held.get(h.row)) for h in hits] for hits in results]
    if queries is None:
        return results
    return [
        _with_snippets(store, query, hits, [held.get(r) if r is not None else None for r in rows])
        for query, hits, rows in zip(queries, results, snippet_rows, strict=True)
    ]


def _with_snippets(
    store: DocStore, query: str, hits: list[Hit], sources: Sequence[Passage | None]
) -> list[Hit]:
    """The hits, those the lexical side matched with a snippet of their title + text (of the
    passage in `sources`, where one is given: the passage BM25 scored best)."""
    assert store.lexical is not None
    matched = [
        (h, source or h.document)
        for h, source in zip(hits, sources, strict=True)
        if h.lexical_score is not None and h.document is not None
    ]
    snippets = store.lexical.snippets(query, [source.full_text for _, source in matched])  # type: ignore[union-attr]
    by_row = {h.row: snippet for (h, _), snippet in zip(matched, snippets, strict=True)}
    return [replace(h, snippet=by_row.get(h.row)) for h in hits]
