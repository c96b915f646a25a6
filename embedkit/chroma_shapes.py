"""Chroma's call and result shapes for the collection API: `include`, `where`, Chroma's query
(`chroma_search`), and `QueryResult`, `GetResult` (the stored vectors where `include` names
embeddings).

A Chroma user reads `result["ids"][0]`, `result["distances"][0]`: `query` gives one list per query
text, `get` and `peek` flat lists, every key present (None where `include` did not ask for it),
and `included` says what was asked. A document without metadata has None there, as in Chroma.
Distances are Chroma's of a cosine space: 1 - the cosine similarity, so 0 is the query's own
direction. `embedkit.collection` fills them from the one search pipeline's hits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from embedkit.arguments import names as checked_names
from embedkit.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable

    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encoder
    from embedkit.index.search import SearchIndex

    Found = list[list[tuple[Document, float | None]]]  # each query's documents and distances

# What Chroma's `include` names, and what embedkit can give of it
QUERY_INCLUDE = ("documents", "metadatas", "distances", "embeddings")
GET_INCLUDE = ("documents", "metadatas", "embeddings")
NOT_HELD = {  # Chroma's names that embedkit refuses, and why
    "uris": "a collection holds no URIs",
    "data": "a collection holds no images or other data",
}
DEFAULT_QUERY_INCLUDE = ("metadatas", "documents", "distances")  # Chroma's defaults
DEFAULT_GET_INCLUDE = ("metadatas", "documents")


def chroma_include(value: Any, *, query: bool) -> list[str]:
    """`include` as Chroma's list of names, checked: a name embedkit does not give is an `InputError`."""
    known = QUERY_INCLUDE if query else GET_INCLUDE
    if value is None:
        return list(DEFAULT_QUERY_INCLUDE if query else DEFAULT_GET_INCLUDE)
    names = checked_names("include", value)
    for name in names:
        if name in NOT_HELD:
            raise InputError(f"include: {name!r} is not supported: {NOT_HELD[name]}")
        if name not in known:
            raise InputError(f"include: unknown name {name!r}: use {', '.join(known)}")
    return list(dict.fromkeys(names))


def _metadata(document: Document) -> dict[str, Any] | None:
    return dict(document.metadata) if document.metadata else None


def get_result(documents: Sequence[Document], include: Sequence[str], vectors: Any = None) -> dict[str, Any]:
    """Chroma's `GetResult` of `documents`: flat lists, in their order (`vectors`: their stored
    vectors, [n, dim], where `include` names embeddings)."""
    return {
        "ids": [d.id for d in documents],
        "embeddings": vectors if "embeddings" in include else None,
        "documents": [d.text for d in documents] if "documents" in include else None,
        "uris": None,
        "included": list(include),
        "data": None,
        "metadatas": [_metadata(d) for d in documents] if "metadatas" in include else None,
    }


def query_result(
    found: Sequence[Sequence[tuple[Document, float | None]]], include: Sequence[str], vectors: Any = None
) -> dict[str, Any]:
    """Chroma's `QueryResult`: for each query, its documents best first with their distances (and
    `vectors`, one [n, dim] array per query, where `include` names embeddings)."""
    result = {
        "ids": [[d.id for d, _ in hits] for hits in found],
        "embeddings": vectors if "embeddings" in include else None,
        "documents": [[d.text for d, _ in hits] for hits in found] if "documents" in include else None,
        "uris": None,
        "included": list(include),
        "data": None,
        "metadatas": [[_metadata(d) for d, _ in hits] for hits in found] if "metadatas" in include else None,
        "distances": [[dist for _, dist in hits] for hits in found] if "distances" in include else None,
    }
    return result


def where_expression(where: Any) -> str | None:
    """A filter as the CLI's expression: a string as it is, Chroma's dict translated (`where_dict`)."""
    if where is None or isinstance(where, str):
        return where
    if isinstance(where, dict):
        from embedkit.index.where_dict import expression_of

        return expression_of(where)
    raise InputError(f"where must be a filter expression (a string) or a dict, not {type(where).__name__}")


def no_where_document(where_document: Any) -> None:
    if where_document is not None:
        raise InputError(
            "where_document is not supported: a collection filters on metadata (where=); "
            "search the text with query_texts"
        )


def chroma_search(
    index: SearchIndex,
    queries: list[str] | None,
    matrix: Any,
    n_results: int,
    fields: list[str],
    settings: dict[str, Any],
    encoder_for: Callable[[SearchIndex], Encoder],
) -> dict[str, Any]:
    """Chroma's query of checked arguments (`Collection.query`): by the query vectors `matrix`, or
    by the `queries` through the one search pipeline; a `QueryResult`, distances 1 - cosine in
    dense mode (None in the others, whose order no distance gives)."""
    n_results = min(n_results, max(index.document_count, 1))  # never more asked of a side than held
    if matrix is not None:
        if matrix.shape[1] != index.dim:
            raise InputError(
                f"query_embeddings of shape {matrix.shape}; this collection holds {index.dim}-d vectors"
            )
        scores, ids = index.search(matrix, n_results, settings["where"])
        found = [_by_id(index, i, s) for i, s in zip(ids, scores, strict=True)]
        return query_result(found, fields, _vectors(index, found, fields))
    request = index.request(n_results, **settings)
    encoder = encoder_for(index) if request.mode != "lexical" else None
    results = index.search_text(queries or [], n_results, encoder, **settings)
    dense = request.mode == "dense"
    found = [[(h.document, 1.0 - h.score if dense else None) for h in hits] for hits in results]
    return query_result(found, fields, _vectors(index, found, fields))  # type: ignore[arg-type]


def _by_id(index: SearchIndex, ids: list[str | None], scores: Any) -> list[tuple[Document, float | None]]:
    """A vector search's hits (ids, cosines) as (document, Chroma's distance) pairs."""
    held = [i for i in ids if i is not None]
    documents = dict(zip(held, index.get_documents(held), strict=True))
    return [(documents[i], 1.0 - float(s)) for i, s in zip(ids, scores, strict=True) if i is not None]  # type: ignore[misc]


def _vectors(index: SearchIndex, found: Found, fields: list[str]) -> Any:
    """Each query's documents' stored vectors, one [n, dim] array per query, where `fields` asks."""
    if "embeddings" not in fields:
        return None
    return [index.vectors_of_documents([d.id for d, _ in hits]) for hits in found]
