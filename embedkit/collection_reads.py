"""What a collection's reads do with their arguments: `query` (Chroma's or embedkit's, as the
arguments say) and `get`, every argument checked on entry, answered from the open index.

Apart from `embedkit.collection`, which holds the folder, the model and the writes: a read needs
of the collection only its live index (`opened`, opened again after a write) and its model checked
against that index (`encoder_for`), handed in as an `IndexReads`. The result shapes are
`embedkit.chroma_shapes`'s; embedkit's hits are the records of `embedkit search --json`
(`embedkit.search.hits.hit_record`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embedkit.arguments import (
    id_list,
    names,
    optional_text,
    optional_weight,
    query_vectors,
    text_list,
    vector_like,
    whole_number,
)
from embedkit.chroma_shapes import chroma_include, chroma_search, get_result, where_expression
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder
    from embedkit.index.search import SearchIndex

# `query`'s arguments, as an unknown one's error names them
QUERY_ARGUMENTS = (
    "query_texts, query_embeddings, n_results (or texts, k), where, include, mode, fusion, alpha"
)


def search_settings(mode: Any, fusion: Any, alpha: Any, where: Any) -> dict[str, Any]:
    """A query's search settings, checked: `mode`, `fusion`, `alpha` as `embedkit search`'s, `where`
    as the CLI's filter expression (Chroma's dict translated)."""
    return {
        "mode": optional_text("mode", mode),
        "fusion": optional_text("fusion", fusion),
        "alpha": optional_weight("alpha", alpha),
        "where": where_expression(where),
    }


@dataclass(frozen=True)
class IndexReads:
    """A collection's reads: `opened()` is its live index (an `InputError` before the first add),
    `exists()` whether it has one yet, `encoder_for(index)` its model checked against the index."""

    opened: Callable[[], SearchIndex]
    exists: Callable[[], bool]
    encoder_for: Callable[[SearchIndex], Encoder]

    def query(
        self,
        texts: Any,
        k: Any,
        chroma_arguments: tuple[Any, Any, Any],  # query_texts, query_embeddings, n_results
        include: Any,
        settings: dict[str, Any],
    ) -> Any:
        """`Collection.query`: Chroma's query where `query_texts` or `query_embeddings` are given
        (or vectors as the first argument), else embedkit's of `texts`."""
        query_texts, query_embeddings, n_results = chroma_arguments
        if query_embeddings is None and vector_like(texts):  # Chroma's first argument: query_embeddings
            query_embeddings, texts = texts, None
        chroma = query_texts is not None or query_embeddings is not None
        if chroma and (texts is not None or k is not None):
            raise InputError("query: give query_texts and n_results (Chroma's) or texts and k, not both")
        if not chroma and n_results is not None:
            raise InputError("query: n_results goes with query_texts or query_embeddings (texts takes k)")
        if chroma:
            wanted = 10 if n_results is None else whole_number("n_results", n_results)
            return self.chroma_query(query_texts, query_embeddings, wanted, include, settings)
        if texts is None:
            raise InputError("query: give the query text (or query_texts=, as in Chroma)")
        return self.hits(texts, 10 if k is None else whole_number("k", k), include, settings)

    def hits(self, texts: Any, k: int, include: Any, settings: dict[str, Any]) -> Any:
        """embedkit's query: hit records (`hit_record`)."""
        from embedkit.search.hits import DEFAULT_FIELDS, checked_fields, hit_record

        fields = checked_fields(DEFAULT_FIELDS if include is None else names("include", include))
        queries = text_list("texts", texts)
        index = self.opened()
        encoder = self.encoder_for(index) if index.request(k, **settings).mode != "lexical" else None
        snippets, passages = "snippet" in fields, include is not None and "passage" in fields
        results = index.search_text(queries, k, encoder, snippets=snippets, passages=passages, **settings)
        records = [[hit_record(rank, hit, fields) for rank, hit in enumerate(hits, 1)] for hits in results]
        return records if not isinstance(texts, str) else records[0]

    def chroma_query(
        self, texts: Any, vectors: Any, n_results: int, include: Any, settings: dict[str, Any]
    ) -> dict[str, Any]:
        """Chroma's query: its `QueryResult`, distances 1 - cosine in dense mode."""
        fields = chroma_include(include, query=True)
        if texts is not None and vectors is not None:
            raise InputError("query: give query_texts or query_embeddings, not both")
        settings["mode"] = settings["mode"] or "dense"  # Chroma's search, its distances exact
        if vectors is not None and settings["mode"] != "dense":
            raise InputError("query: query_embeddings are searched in dense mode only")
        matrix = None if vectors is None else query_vectors("query_embeddings", vectors)
        queries = None if texts is None else text_list("query_texts", texts)
        return chroma_search(self.opened(), queries, matrix, n_results, fields, settings, self.encoder_for)

    def get(
        self, ids: Any, where: Any, limit: Any, offset: Any, include: Sequence[str] | None
    ) -> dict[str, Any]:
        """`Collection.get`: Chroma's `GetResult` of the documents `ids` held (in the order asked),
        or of those that pass `where`, or of all, in the order added; `offset` skipped, `limit` at most."""
        fields = chroma_include(include, query=False)
        keys = None if ids is None else id_list("ids", ids)
        expression = where_expression(where)
        first = 0 if offset is None else whole_number("offset", offset, least=0)
        most = None if limit is None else whole_number("limit", limit, least=0)
        if not self.exists():
            return get_result([], fields)
        index = self.opened()
        if keys is not None:
            passing = None if expression is None else {d.id for d in index.documents_held(expression)}
            found = [
                d for d in index.get_documents(keys) if d is not None and (passing is None or d.id in passing)
            ]
            chosen = found[first : None if most is None else first + most]
        else:
            chosen = index.documents_held(expression, first, most)
        vectors = index.vectors_of_documents([d.id for d in chosen]) if "embeddings" in fields else None
        return get_result(chosen, fields, vectors)
