"""`SearchIndex`: the one object a user holds to search an index (vectors in, ids out; or texts in, hits out).

It speaks documents and their ids; the index's vector rows (positions, as faiss numbers them, one
per passage in an index of passages) are `index.rows` (`embedkit.index.vector_rows`), which the
whole-index work (`adapt`) and the by-id calls here read. The index's default mode and fusion are
`embedkit.search.request`'s (`default_mode`, `fusion_for`), which `request` applies.

`SearchIndex.load` opens an index folder (its `LocalStore`: FAISS, the SQLite documents, the
tantivy BM25 side); a pushed collection is opened as one too (`embedkit.remote.search`). Either
way every search goes through the one pipeline (`embedkit.search.pipeline`) over the store's
seam (`embedkit.search.store`), as `embedkit search`, `/search`, `eval retrieval` and the fusion
calibration do. An index of passages (`embedkit.index.passages`) answers with documents, each
ranked by its best passage; a metadata filter (`where`) is over the documents' metadata.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from embedkit.arguments import query_vectors as checked_vectors
from embedkit.arguments import text_list
from embedkit.encode.prefixes import recorded_prefixes
from embedkit.encode.protocol import Encodes
from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.folder import check_encoder_for, fit_encoder, index_files_dir, open_model_for
from embedkit.index.local_store import LocalStore
from embedkit.index.vector_rows import IndexRows
from embedkit.search import pipeline
from embedkit.search.fusion import bounded_k
from embedkit.search.hits import Hit
from embedkit.search.request import SearchRequest, default_mode, fusion_for

if TYPE_CHECKING:
    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encoder
    from embedkit.search.store import SearchStore

Moved = TypeVar("Moved", bound=Callable[..., Any])


def _moved(old: str, new: str, call: Moved) -> Moved:
    """`call`, once a `DeprecationWarning` says that `old` is now `new` (pointing at the caller's line)."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)
    return call


class SearchIndex:
    """An index opened for search.

    >>> index = SearchIndex.load("cranfield-index")  # doctest: +SKIP
    >>> scores, ids = index.search(query_vectors, k=10)  # plain arrays, as faiss  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5)  # with the documents  # doctest: +SKIP
    >>> vectors = index.rows.vectors(range(len(index.rows)))  # every vector row  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | Path,
        meta: dict[str, Any],
        store: SearchStore[Any],
        *,
        folder: Path | None = None,  # the version folder read (None: a collection on a server)
        placement: Any = None,  # holds faiss's GPU resources as long as the index lives
    ) -> None:
        self.path = path
        self.folder = folder
        self.meta = meta
        self.store = store
        self._placement = placement
        self._encoder: Encoder | None = None
        self.prefixes = recorded_prefixes(meta)
        self.rows = IndexRows(store, self.prefixes, self.checked)  # the vector rows, by position

    @classmethod
    def load(
        cls, path: str | Path, *, runtime: Runtime | None = None, gpu: bool = False, device: str | None = None
    ) -> SearchIndex:
        """Open an index folder; a missing, truncated or corrupt file is an `InputError`.

        A load that overlaps an append reads the old or the new version, never a mix of both.
        `runtime`'s device cuda or cuda:N searches with faiss on that GPU (`embedkit.index.faiss_gpu`);
        the model is opened apart, by `encoder()`. `device=` (and `gpu=True`, deprecated: cuda)
        are the older spelling of `runtime`.
        """
        path = Path(path)
        runtime = runtime_of(runtime, gpu, device=device)
        placement = placement_for(runtime)  # a GPU faiss cannot have: one line, before any reading
        store = LocalStore.open(path)
        if placement is not None and store.quantize is not None:
            store.close()
            raise InputError(
                f"{path} is a quantized index ({store.quantize}), searched on the CPU: "
                "use --device auto or cpu"
            )
        if placement is not None:
            try:
                store.vectors = placement.to_gpu(store.vectors, store.kind)
            except BaseException:
                store.close()
                raise
        return cls(path, store.meta, store, folder=store.folder, placement=placement)

    @property
    def faiss_device(self) -> str:
        """Where faiss searches: cpu or cuda:N."""
        return self._placement.name if self._placement is not None else "cpu"

    @property
    def version(self) -> str | None:
        """The version folder's name (`v-000003`), or None for an index of the flat layout."""
        return self.folder.name if self.folder is not None and self.folder != self.path else None

    def is_current(self) -> bool:
        """Whether the version read is still the one `CURRENT` names (an append or a rebuild
        since makes another one live). A file read: cheap enough for every request of a server.
        A collection has no versions: pushes upsert into it and are seen at once."""
        return self.folder is None or index_files_dir(self.path) == self.folder

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def document_count(self) -> int:
        """The documents held (`len(index.rows)` is the vectors, one per passage in an index of passages)."""
        return self.store.document_count()

    @property
    def passages(self) -> bool:
        return self.store.passages

    @property
    def has_lexical(self) -> bool:
        return self.store.has_lexical

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    def no_lexical_reason(self) -> str:
        """Why lexical and hybrid search are refused here, and the command that adds the side."""
        if self.folder is None:
            return f"{self.path} has no BM25 field"
        fix = f"search it with --mode dense, or add one: `embedkit index --out {self.path} --reindex-lexical`"
        if self.meta.get("lexical") is not None:
            return f"the index {self.path} has the lexical side of an earlier embedkit: {fix}"
        return f"the index {self.path} has no lexical side (built with --no-lexical): {fix}"

    def request(self, k: int = 10, **settings: Any) -> SearchRequest:
        """A `SearchRequest` with this index's defaults filled in and checked; its filter (`where`)
        compiled now, so a bad expression fails before the model runs."""
        request = SearchRequest(k, **settings).resolved(self.meta, self.has_lexical, self.no_lexical_reason())
        if request.where is not None:
            self.store.compile_filter(request.where)
        return request

    def search(
        self, query_vectors: np.ndarray, k: int = 10, where: str | None = None
    ) -> tuple[np.ndarray, list[list[str | None]]]:
        """Scores float32 [q, k] and doc ids [q][k] of each query's `k` nearest documents, best first.

        `query_vectors` is [q, dim] (or [dim]); it is L2-normalized here, so scores are cosine
        similarities whatever the caller passes. `k` is capped at the index's size; an id is None
        (and its score -inf) where fewer than `k` documents pass `where` (a metadata filter,
        `embedkit.index.where`) or an approximate index found fewer. An index of passages gives
        each document once, scored by its best passage.
        """
        k = bounded_k(k, self.document_count)  # checked as `whole_number`, then at most the documents
        queries = checked_vectors("query_vectors", query_vectors)
        if queries.shape[1] != self.dim:
            raise InputError(f"query_vectors of shape {queries.shape}; this index holds {self.dim}-d vectors")
        if where is not None and not isinstance(where, str):
            raise InputError(f"where must be a filter expression (a string), not {type(where).__name__}")
        allowed = self.store.compile_filter(where) if where is not None else None
        side = pipeline.dense_side(self.store, queries, k, allowed)
        if self.passages:
            width = min(k, self.document_count)
            ranked = [[(b[doc], s) for doc, s in r] for r, b in zip(side.rankings, side.best, strict=True)]
        else:
            rows = len(self.rows)
            width = min(k, rows) if rows and self.store.reachable(allowed) else 0
            ranked = side.rankings
        held = self.store.held_at(sorted({row for ranking in ranked for row, _ in ranking}))
        scores = np.full((len(ranked), width), -np.inf, dtype=np.float32)
        ids: list[list[str | None]] = [[None] * width for _ in ranked]
        for q, ranking in enumerate(ranked):
            for j, (row, score) in enumerate(ranking[:width]):
                scores[q, j], ids[q][j] = score, held[row].id
        return scores, ids

    def encoder(
        self,
        model: str | Path | None = None,
        device: str | None = None,
        precision: str | None = None,
        *,
        runtime: Runtime | None = None,
    ) -> Encoder:
        """The index's model (or `model`, after `check_model_for`), opened once where `runtime` says
        (`device=`, `precision=`: its older spelling)."""
        if self._encoder is None:
            runtime = runtime_of(runtime, device=device, precision=precision)
            self._encoder = open_model_for(self.meta, model, runtime)  # checked there
        return self._encoder

    def check_encoder(self, encoder: Encoder) -> None:
        """An `InputError` unless `encoder` runs the model this index was built with."""
        check_encoder_for(self.meta, encoder, f"the index {self.path}")

    def checked(self, encoder: Encoder | None) -> Encoder:
        """`encoder` once checked to run this index's model, giving the index's dimension; None: the
        index's own, opened once."""
        if encoder is None:
            return self.encoder()
        if encoder is not self._encoder:
            self.check_encoder(encoder)
        return fit_encoder(self.meta, encoder)  # cut to the index's dimension (`index --dim`)

    def search_text(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        encoder: Encoder | None = None,
        **settings: Any,  # mode, fusion, alpha, depth, snippets, where, passages: `SearchRequest`
    ) -> list[list[Hit]]:
        """Hits with their documents for each query, best first (`embedkit.search.pipeline`).

        dense: the index's model (or `encoder`) and FAISS; lexical: BM25 over title + text; hybrid:
        both, fused (`embedkit.search.fusion`; the default, prf, searches the dense side again with
        a query moved toward the top fused hits), with the index's calibrated fusion unless
        `fusion` / `alpha` say otherwise. With `where`, each side searches only the documents
        that pass it, so fusion sees no other.
        """
        items = text_list("queries", queries, blank=True, empty=True)  # as the pipeline takes them
        if encoder is not None and (
            isinstance(encoder, (str, bytes)) or not isinstance(encoder, Encodes)
        ):
            raise InputError(f"encoder must be an open encoder (with encode), not {type(encoder).__name__}")
        request = self.request(k, **settings)
        model = self.checked(encoder) if request.mode != "lexical" else None
        return pipeline.search(self.store, items, model, request, self.prefixes)

    def documents_held(
        self, where: str | None = None, offset: int = 0, limit: int | None = None
    ) -> list[Document]:
        """The documents held that pass `where` (None: all), once each, in the order they were
        added, `offset` of them skipped and at most `limit` read; a collection on a server is not
        listed (an `InputError`)."""
        if not isinstance(self.store, LocalStore):
            raise InputError(f"{self.path} is a collection on a server: its documents are not listed")
        rows = self.store.held_rows() if where is None else self.store.compile_filter(where)
        stop = None if limit is None else offset + limit
        if not self.passages:  # a row per document: only those asked for are read
            return [d for d in self.rows.documents(rows[offset:stop].tolist()) if d is not None]
        found = {d.id: d for d in self.rows.documents(rows.tolist()) if d is not None}  # passages: once
        return list(found.values())[offset:stop]

    def vectors_of_documents(self, ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of the documents `ids`, all held, [len(ids), dim] (`rows.vectors`);
        an index of passages holds a vector per passage, not per document: an `InputError`."""
        if self.passages or not isinstance(self.store, LocalStore):
            raise InputError(
                f"{self.path} holds no vector per document (an index of passages, or on a server)"
            )
        rows = self.store.rows_by_id(ids)
        return self.rows.vectors([rows[i][0] for i in ids])

    def get_documents(self, ids: Sequence[str]) -> list[Document | None]:
        """Stored documents by id (None for an unknown id), in the order asked."""
        return self.store.documents_by_id(ids)

    # Earlier names, kept working: the rows' face moved to `index.rows`, the index's defaults are
    # `embedkit.search.request`'s (`request` applies them)

    def __len__(self) -> int:
        """Deprecated: `len(index.rows)` (vector rows), or `index.document_count`."""
        return _moved("SearchIndex.__len__", "len(index.rows) or index.document_count", self.rows.__len__)()

    def vectors_of_rows(self, rows: Sequence[int], encoder: Encoder | None = None) -> np.ndarray:
        """Deprecated: `index.rows.vectors(rows, encoder)`."""
        return _moved("SearchIndex.vectors_of_rows", "index.rows.vectors", self.rows.vectors)(rows, encoder)

    def documents_at(self, rows: Sequence[int]) -> list[Document | None]:
        """Deprecated: `index.rows.documents(rows)`."""
        return _moved("SearchIndex.documents_at", "index.rows.documents", self.rows.documents)(rows)

    def default_mode(self, fusion: str | None = None) -> str:
        """Deprecated: `embedkit.search.request.default_mode(index.meta, index.has_lexical, fusion)`."""
        return _moved("SearchIndex.default_mode", "embedkit.search.request.default_mode", default_mode)(
            self.meta, self.has_lexical, fusion
        )

    def default_fusion(self, fusion: str | None = None, alpha: float | None = None) -> tuple[str, float]:
        """Deprecated: `embedkit.search.request.fusion_for(index.meta, fusion, alpha)`."""
        return _moved("SearchIndex.default_fusion", "embedkit.search.request.fusion_for", fusion_for)(
            self.meta, fusion, alpha
        )


def open_index_for(path: str | Path, encoder: Encoder, *, runtime: Runtime | None = None) -> SearchIndex:
    """`SearchIndex.load(path, runtime=...)`, checked to hold vectors of `encoder`'s model (else an
    `InputError`)."""
    index = SearchIndex.load(path, runtime=runtime)
    try:
        index.check_encoder(encoder)
    except InputError:
        index.close()
        raise
    return index
