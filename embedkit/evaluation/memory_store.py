"""A corpus held in memory as a search store: exact inner-product search and a BM25 side in memory.

What `eval retrieval` searches without an index, and what the fusion calibration searches its
sample of an index with: a `embedkit.search.store.SearchStore`, so both run the one search
pipeline (`embedkit.search.pipeline`) as `embedkit search` does, on plain arrays. Row i is
`documents[i]` and `vectors[i]`; given each row's document number (`numbers`), the rows are
passages (`embedkit.data.document.Passage`) and the pipeline ranks their documents by their best
passage, as in an index of passages.

Exact search is `embedkit.search.exact`'s, the one every exact search uses; here ties go to the
larger doc id (its `tie_ranks`), so the chosen set matches the order the metrics rank by
(trec_eval's). Query vectors are taken as given: the pipeline's are
unit length. The BM25 side (`embedkit.index.lexical`, tantivy in memory) is built on its first
search. The calibration searches the same sample once per candidate fusion, so each side's last
answers are kept (`MEMO`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedkit.data.document import Document, Passage, TextSpan
from embedkit.errors import InputError
from embedkit.search.exact import exact_top_k, tie_ranks

MEMO = 4  # answers of each side kept: the calibration asks the same searches for each candidate

Ranking = list[tuple[int, float]]


class MemoryStore:
    """Documents (and their vectors) in memory, searched exactly (see the module docstring)."""

    makes_snippets = False

    def __init__(
        self,
        documents: Sequence[TextSpan],
        vectors: np.ndarray | None = None,  # [len(documents), dim], unit rows; None: lexical only
        lexical_settings: Any = None,  # `embedkit.index.lexical.LexicalSettings` (None: the defaults)
        numbers: Sequence[int] | None = None,  # passages: each row's document number; None: documents
    ) -> None:
        self.documents = list(documents)
        if numbers is not None and len(numbers) != len(self.documents):
            raise InputError("MemoryStore: one document number per passage is needed")
        self.passages = numbers is not None
        self.numbers = list(numbers) if numbers is not None else list(range(len(self.documents)))
        self.ids = [str(doc.id) for doc in self.documents]
        self.vectors = None if vectors is None else _matrix(vectors, "document vectors")
        self.dim = 0 if self.vectors is None else int(self.vectors.shape[1])
        self.has_lexical = True
        self._settings = lexical_settings
        self._lexical: Any = None  # the tantivy index, built on the first lexical search
        self._tie_rank: np.ndarray | None = None
        self._memo: dict[tuple[Any, ...], list[Ranking]] = {}

    def compile_filter(self, where: str) -> Any:
        raise InputError("metadata filters need an index: build one with `embedkit index`")

    def reachable(self, allowed: Any) -> int:
        return len(self.documents)

    def document_count(self) -> int:
        return len(set(self.numbers)) if self.passages else len(self.documents)

    def search_dense(self, vectors: np.ndarray, k: int, allowed: Any) -> list[Ranking]:
        if self.vectors is None:
            raise InputError("this corpus was not embedded: dense search needs its vectors")
        queries = _matrix(vectors, "query vectors")
        key = ("dense", queries.shape, queries.tobytes(), k)
        if key not in self._memo:
            if self._tie_rank is None:
                self._tie_rank = tie_ranks(self.ids)
            scores, rows = exact_top_k(queries, self.vectors, k, self._tie_rank)
            found = [
                [(int(r), float(s)) for r, s in zip(row, vals, strict=True) if np.isfinite(s)]
                for row, vals in zip(rows, scores, strict=True)
            ]
            self._remember(key, found)
        return self._memo[key]

    def search_lexical(self, texts: Sequence[str], k: int, allowed: Any) -> list[Ranking]:
        key = ("lexical", tuple(texts), k)
        if key not in self._memo:
            if self._lexical is None:
                from embedkit.index.lexical import LexicalIndex

                self._lexical = LexicalIndex.create(None, self._settings)
                self._lexical.add(0, self.documents)
                self._lexical.commit()
            self._remember(key, self._lexical.search(list(texts), k))
        return self._memo[key]

    def _remember(self, key: tuple[Any, ...], found: list[Ranking]) -> None:
        if len(self._memo) >= MEMO:
            self._memo.pop(next(iter(self._memo)))
        self._memo[key] = found

    def vectors_of_rows(self, rows: Sequence[int]) -> np.ndarray | None:
        return None if self.vectors is None else self.vectors[list(rows)]

    def held_at(self, rows: Sequence[int]) -> dict[int, TextSpan]:
        return {int(r): self.documents[int(r)] for r in rows if 0 <= int(r) < len(self.documents)}

    def document_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        return {int(r): self.numbers[int(r)] for r in rows if 0 <= int(r) < len(self.documents)}

    def documents_by_id(self, ids: Sequence[str]) -> list[Document | None]:
        whole = [unit.document if isinstance(unit, Passage) else unit for unit in self.documents]
        by_id = dict(zip(self.ids, whole, strict=True))
        return [by_id.get(str(i)) for i in ids]

    def snippets(self, query: str, texts: Sequence[str]) -> list[str | None]:
        return [None for _ in texts]

    def close(self) -> None:
        if self._lexical is not None:
            self._lexical.close()
            self._lexical = None


def exact_search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    k: int,
    query_ids: Sequence[str],
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """The top `k` documents of each query by inner product, as a run `{query_id: {doc_id: score}}`.

    `exclude[i]`, if given, is a doc id that query i must not retrieve (BEIR's identical ids).
    """
    queries = _matrix(query_vectors, "query vectors")
    docs = _matrix(doc_vectors, "document vectors")
    if len(doc_ids) != len(docs) or len(query_ids) != len(queries):
        raise InputError("exact_search: one id per vector is needed")
    position = {doc: j for j, doc in enumerate(doc_ids)}
    excluded = np.array([position.get(d, -1) for d in exclude]) if exclude is not None else None
    scores, rows = exact_top_k(queries, docs, k, tie_ranks(doc_ids), excluded)
    return {
        query_id: {doc_ids[j]: float(s) for j, s in zip(rows[i], scores[i], strict=True) if np.isfinite(s)}
        for i, query_id in enumerate(query_ids)
    }


def _matrix(vectors: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D array, got shape {array.shape}")
    return np.ascontiguousarray(array)
