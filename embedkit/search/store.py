"""The seam under search: what the pipeline needs from where an index's data lives.

A store answers in rows: a row is a vector's permanent key (a document's, or a passage's in an
index of passages), and every ranking is a list of (row, score), best first, higher is better.
`compile_filter` turns a metadata filter (`embedkit.index.where`) into what this store's two
searches take as their allowed set: the allowed rows of an index folder, a filter expression of a
search server. Two stores implement it: an index folder (`embedkit.index.local_store`: FAISS, the
SQLite documents and the tantivy BM25 side) and a pushed collection (`embedkit.remote.search`);
`embedkit.evaluation.memory_store` holds a BEIR corpus in memory for exact evaluation.
The pipeline (`embedkit.search.pipeline`) reaches a store only through these calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from embedkit.data.document import Document, TextSpan

Ranking = list[tuple[int, float]]  # (row, score), best first
Allowed = TypeVar("Allowed")  # a store's compiled filter: its allowed set


class SearchStore(Protocol[Allowed]):
    """What a search reads from an index's data (see the module docstring)."""

    dim: int  # the vectors' dimension
    passages: bool  # one vector per passage: rankings of rows are collapsed to documents
    has_lexical: bool  # a BM25 side to search
    makes_snippets: bool  # the BM25 side can highlight its matches in a text

    def compile_filter(self, where: str) -> Allowed:
        """The filter `where` as this store's allowed set; a bad expression is an `InputError`."""
        ...

    def reachable(self, allowed: Allowed | None) -> int:
        """The vector rows a search among `allowed` can return (at most; None: every live row)."""
        ...

    def document_count(self) -> int:
        """The documents held (as many as the vector rows, unless the store holds passages)."""
        ...

    def search_dense(self, vectors: np.ndarray, k: int, allowed: Allowed | None) -> list[Ranking]:
        """Each query vector's best `k` rows by cosine (vectors are normalised here), among `allowed`."""
        ...

    def search_lexical(self, texts: Sequence[str], k: int, allowed: Allowed | None) -> list[Ranking]:
        """Each text's best `k` rows by BM25, among `allowed`; no terms: an empty ranking."""
        ...

    def vectors_of_rows(self, rows: Sequence[int]) -> np.ndarray | None:
        """The stored (normalised) vectors of `rows`, [len(rows), dim]; None where the store cannot
        read them back (the caller embeds what the rows hold instead)."""
        ...

    def held_at(self, rows: Sequence[int]) -> dict[int, TextSpan]:
        """Row -> what it holds (its document, or in a store of passages its passage), for the
        rows that exist."""
        ...

    def documents_by_id(self, ids: Sequence[str]) -> list[Document | None]:
        """Each id's whole document, None where the store holds no live document of that id."""
        ...

    def document_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        """Row -> the number of its document, for the rows that exist: the same number for every
        passage of one document (the row itself in a store without passages)."""
        ...

    def snippets(self, query: str, texts: Sequence[str]) -> list[str | None]:
        """Each text with the query's matched terms in <b> (HTML), where the BM25 side matched."""
        ...

    def close(self) -> None: ...
