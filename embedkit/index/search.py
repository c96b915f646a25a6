"""Searching an index folder: `SearchIndex` (vectors in, ids out; or texts in, hits out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.errors import InputError
from embedkit.index.docstore import DocStore
from embedkit.index.kinds import GpuPlacement

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.encode.protocol import Encoder

from embedkit.index.folder import (
    DOCS_FILE,
    INDEX_FILE,
    index_files_dir,
    open_model_for,
    read_faiss,
    read_index_meta,
)
from embedkit.index.integrity import check_scores, load_consistent
from embedkit.versioned import verify_checksums


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its cosine similarity, its FAISS row."""

    id: str
    score: float
    row: int
    document: Document | None = None  # filled by `search_text`



# --- searching -----------------------------------------------------------------------------------


class SearchIndex:
    """An index folder opened for search.

    >>> index = SearchIndex.load("cranfield-index")  # doctest: +SKIP
    >>> scores, ids = index.search(query_vectors, k=10)  # plain arrays, as faiss  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5)  # with the documents  # doctest: +SKIP
    """

    def __init__(self, path: Path, meta: dict[str, Any], index, store: DocStore, placement=None) -> None:
        self.path = path
        self.meta = meta
        self.index = index
        self.store = store
        self._placement = placement  # holds the GPU resources as long as the index lives
        self._encoder: Encoder | None = None

    @classmethod
    def load(cls, path: str | Path, *, gpu: bool = False) -> SearchIndex:
        """Open an index folder; a missing, truncated or corrupt file is an `InputError`.

        A load that overlaps an append reads the old or the new version, never a mix of both.
        """
        path = Path(path)
        meta, index, store = load_consistent(path, index_files_dir, cls._read_version)
        placement = GpuPlacement() if gpu else None
        if placement is not None:
            index = placement.to_gpu(index, meta["kind"])
        return cls(path, meta, index, store, placement)

    @staticmethod
    def _read_version(folder: Path) -> tuple[dict[str, Any], Any, DocStore]:
        verify_checksums(folder)  # every file of the version, as written (cached: cheap after once)
        meta = read_index_meta(folder)
        index = read_faiss(folder / INDEX_FILE, meta)
        store = DocStore.open(folder / DOCS_FILE)
        if store.next_row() != index.ntotal:
            store.close()
            raise InputError(f"{folder / DOCS_FILE} does not match {folder / INDEX_FILE}: rebuild the index")
        return meta, index, store

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    def search(self, query_vectors: np.ndarray, k: int = 10) -> tuple[np.ndarray, list[list[str | None]]]:
        """Scores float32 [q, k] and doc ids [q][k] of each query's `k` nearest documents, best first.

        `query_vectors` is [q, dim] (or [dim]); it is L2-normalized here, so scores are cosine
        similarities whatever the caller passes. `k` is capped at the index's size; an id is None
        where an approximate index found fewer than `k` documents.
        """
        scores, rows = self._search_rows(query_vectors, k)
        ids = self.store.ids_of_rows(rows[rows >= 0].tolist())
        return scores, [[ids[int(r)] if r >= 0 else None for r in row] for row in rows]

    def _search_rows(self, query_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(f"query vectors of shape {queries.shape}; this index holds {self.dim}-d vectors")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        k = max(1, min(k, len(self)))
        if not len(queries) or not len(self):
            return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        scores, rows = self.index.search(np.ascontiguousarray(l2_normalize(queries)), k)
        check_scores(scores, rows, self.meta, self.path)
        return scores, rows

    def encoder(
        self, model: str | Path | None = None, device: str = "auto", precision: str | None = None
    ) -> Encoder:
        """The index's model (or `model`, after `check_model_for`), opened once."""
        if self._encoder is None:
            self._encoder = open_model_for(self.meta, model, device, precision)  # checked there
        return self._encoder

    def check_encoder(self, encoder: Encoder) -> None:
        """An `InputError` unless `encoder` runs the model this index was built with."""
        if encoder.fingerprint != self.meta["model_fingerprint"] or encoder.dim != self.dim:
            name = getattr(encoder, "path", "the encoder")
            raise InputError(
                f"model {name} (fingerprint {encoder.fingerprint}, dim {encoder.dim}) is not the model "
                f"the index {self.path} was built with ({self.meta['model']})"
            )

    def search_text(
        self, queries: str | Sequence[str], k: int = 10, encoder: Encoder | None = None
    ) -> list[list[Hit]]:
        """Embed `queries` with the index's model (or `encoder`) and return hits with their documents."""
        items = [queries] if isinstance(queries, str) else list(queries)
        if encoder is None:
            encoder = self.encoder()
        elif encoder is not self._encoder:
            self.check_encoder(encoder)
        vectors = encoder.encode(items, normalize=True).reshape(len(items), -1)
        scores, rows = self._search_rows(vectors, k)  # (Q, k) each
        found = rows[rows >= 0].tolist()
        docs = dict(zip(found, self.store.by_rows(found), strict=True))
        return [
            [Hit(docs[r].id, float(scores[q, j]), r, docs[r]) for j, r in enumerate(row) if r >= 0]
            for q, row in enumerate(rows.tolist())
        ]

    def get_documents(self, ids: Sequence[str]) -> list[Document | None]:
        """Stored documents by id (None for an unknown id), in the order asked."""
        return self.store.by_ids(ids)


def open_index_for(path: str | Path, encoder: Encoder, *, gpu: bool = False) -> SearchIndex:
    """`SearchIndex.load(path)`, checked to hold vectors of `encoder`'s model (else an `InputError`)."""
    index = SearchIndex.load(path, gpu=gpu)
    try:
        index.check_encoder(encoder)
    except InputError:
        index.close()
        raise
    return index
