"""Search results: `Hit`, its JSON form (`hit_record`), and the documents a ranking's hits carry.

`with_documents` gives the hits the search pipeline ranked (`embedkit.search.pipeline`) their ids
and documents, and on request their best passage, from what their rows hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.data.document import Document, Passage, TextSpan


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its score, its FAISS row, and each side's own score.

    `score` is the ranking's score: the cosine similarity (dense), BM25 (lexical), or the fused
    score (hybrid). `dense_score` and `lexical_score` are None where that side did not find it.
    """

    id: str
    score: float
    row: int
    document: Document | None = None  # filled by the pipeline's documents stage (`with_documents`)
    dense_score: float | None = None
    lexical_score: float | None = None
    snippet: str | None = None  # the best window, HTML, terms in <b> (`embedkit.search.snippets`)
    passage: Passage | None = None  # the best passage, in an index of passages (`SearchRequest.passages`)
    rerank_score: float | None = None  # the cross-encoder's score, where re-ranked (`embedkit.search.rerank`)


# A hit's fields beyond its rank, id and score, as `include` names them (Chroma's word): the
# document's title, text and metadata, its snippet (the window that best answers), its best passage, and
# each side's own score (`dense_score`, `lexical_score`)
HIT_FIELDS = ("title", "text", "metadata", "snippet", "passage", "scores")
# What a hit holds unless asked otherwise, on every side (`embedkit search --json`, `/search`, the
# search page, the Python API): what a person reads in a list of results, not the whole document
DEFAULT_FIELDS = ("title", "metadata", "snippet", "passage", "scores")


def checked_fields(include: Iterable[str]) -> frozenset[str]:
    """`include` as a set of `HIT_FIELDS`; another name is an `InputError` listing them."""
    if isinstance(include, str):
        include = [include]
    fields = frozenset(include)
    unknown = sorted(str(f) for f in fields - set(HIT_FIELDS))
    if unknown:
        raise InputError(f"unknown hit field {unknown[0]!r} in include: use {', '.join(HIT_FIELDS)}")
    return fields


def hit_record(rank: int, hit: Hit, include: Iterable[str] = DEFAULT_FIELDS) -> dict[str, Any]:
    """One hit as JSON, the same for `embedkit search --json`, the server's `/search` and the
    Python API (`embedkit.collection`), with the fields `include` names (`DEFAULT_FIELDS`: all
    but the document's full text).

    `dense_score` and `lexical_score` ("scores") are present (null where that side did not return
    the hit); `snippet` where one was made; `passage` (its text, and its start and end characters
    in `text`) where passages were asked for; `rerank_score` (with the scores) where a
    cross-encoder re-ranked the hit; `title`, `text` and `metadata` where the document is known.
    """
    fields = include if isinstance(include, frozenset) else checked_fields(include)
    record: dict[str, Any] = {"rank": rank, "id": hit.id, "score": float(hit.score)}
    if "scores" in fields:
        record["dense_score"] = None if hit.dense_score is None else float(hit.dense_score)
        record["lexical_score"] = None if hit.lexical_score is None else float(hit.lexical_score)
        if hit.rerank_score is not None:
            record["rerank_score"] = float(hit.rerank_score)
    if hit.snippet is not None and "snippet" in fields:
        record["snippet"] = hit.snippet
    if hit.passage is not None and "passage" in fields:
        record["passage"] = {"text": hit.passage.text, "start": hit.passage.start, "end": hit.passage.end}
    if hit.document is not None:
        doc = hit.document
        document = {"title": doc.title, "text": doc.text, "metadata": doc.metadata or {}}
        record.update((name, value) for name, value in document.items() if name in fields)
    return record


def with_documents(
    ranked: list[list[Hit]], held: dict[int, TextSpan], of_passages: bool, passages: bool
) -> list[list[Hit]]:
    """Each query's hits with `id` and `document` set from what their rows hold (`held`: row ->
    document, or in an index of passages (`of_passages`) row -> passage), and their passage
    where `passages` asks for it."""
    results = []
    for hits in ranked:
        found = []
        for h in hits:
            unit = held[h.row]
            document = unit.document if of_passages else unit  # type: ignore[union-attr]
            passage = unit if of_passages and passages else None
            found.append(replace(h, id=document.id, document=document, passage=passage))  # type: ignore[arg-type]
        results.append(found)
    return results
