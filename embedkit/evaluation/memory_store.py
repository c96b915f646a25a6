"""A corpus held in memory as a search store: exact inner-product search and a BM25 side in memory.

What `eval retrieval` searches without an index, and what the fusion calibration searches its
sample of an index with: a `embedkit.search.store.SearchStore`, so both run the one search
pipeline (`embedkit.search.pipeline`) as `embedkit search` does, on plain arrays. Row i is
`documents[i]` and `vectors[i]`; given each row's document number (`numbers`), the rows are
passages (`embedkit.data.document.Passage`) and the pipeline ranks their documents by their best
passage, as in an index of passages.

Exact search (`exact_search`, `exact_top_k`) scores in blocks (`QUERY_BLOCK` x `SEARCH_CHUNK`) to
bound memory; among equal scores the larger doc id ranks first, so the chosen set matches the
order the metrics rank by (trec_eval's). Query vectors are taken as given: the pipeline's are
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
from embedkit.search.fusion import bounded_k

SEARCH_CHUNK = 16384  # documents scored at once; a 1024 x 16384 float32 block is 64 MiB
QUERY_BLOCK = 1024  # queries scored at once
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


def tie_ranks(doc_ids: Sequence[str]) -> np.ndarray:
    """Each document's position when ids are sorted descending: the lower wins a tie in score."""
    tie_rank = np.empty(len(doc_ids), dtype=np.int64)
    tie_rank[sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)] = np.arange(len(doc_ids))
    return tie_rank


def exact_top_k(
    queries: np.ndarray, docs: np.ndarray, k: int, tie_rank: np.ndarray, exclude: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) [q, k] of each query's `k` best documents by inner product, best first; a
    score is -inf where fewer exist. `exclude[i]`, if given, is a row query i must not retrieve
    (-1: none)."""
    if queries.shape[1] != docs.shape[1]:
        raise InputError(f"query vectors have dim {queries.shape[1]}, document vectors {docs.shape[1]}")
    k = bounded_k(k, len(docs))
    excluded = exclude if exclude is not None else np.full(len(queries), -1)
    out_scores, out_rows = [], []
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
        out_scores.append(best_scores)
        out_rows.append(best_docs)
    if not out_scores:
        return np.empty((0, 0), np.float32), np.empty((0, 0), np.int64)
    return np.concatenate(out_scores), np.concatenate(out_rows)


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
