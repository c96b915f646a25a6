"""Searching an index folder: `SearchIndex` (vectors in, ids out; or texts in, hits out).

An index of passages (`embedkit.index.passages`) is searched the same way and answers with
documents: each side ranks a document by its best passage (`embedkit.index.side_rankings`), and
hybrid fusion combines those document scores. A hit's `row` is then its best passage's row, and
`passage` that passage. A metadata filter (`where`) is over the documents' metadata.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.encode.prefixes import recorded_prefixes
from embedkit.errors import InputError
from embedkit.index.calibration import default_mode, fusion_for
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.fusion import check_fusion
from embedkit.index.hits import Hit, hit_record, with_documents  # noqa: F401 (hit_record: its old home)
from embedkit.index.side_rankings import (
    dense_rankings,
    feedback_rankings,
    lexical_rankings,
    rank,
    start_lexical,
)

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.encode.protocol import Encoder

from embedkit.index.folder import (
    check_encoder_for,
    index_files_dir,
    open_model_for,
)
from embedkit.index.integrity import check_scores, load_consistent, read_version
from embedkit.index.rows import search_rows

SEARCH_MODES = ("dense", "lexical", "hybrid")
# Each side's candidates before fusion: BEIR's evaluation depth, or k when k is larger.
FUSION_DEPTH = 100
_FILTER_CACHE = 32  # metadata filters whose allowed rows a loaded index keeps (a server's repeats)


# --- searching -----------------------------------------------------------------------------------


class SearchIndex:
    """An index folder opened for search.

    >>> index = SearchIndex.load("cranfield-index")  # doctest: +SKIP
    >>> scores, ids = index.search(query_vectors, k=10)  # plain arrays, as faiss  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5)  # with the documents  # doctest: +SKIP
    """

    def __init__(
        self,
        path: Path,
        meta: dict[str, Any],
        index,
        store: DocStore,
        placement=None,
        folder: Path | None = None,
    ) -> None:
        self.path = path
        self.folder = folder or path  # the version folder the files were read from
        self.meta = meta
        self.index = index
        self.store = store
        self._placement = placement  # holds the GPU resources as long as the index lives
        self._encoder: Encoder | None = None
        self.masked = store.masked_rows() if hasattr(store, "masked_rows") else np.empty(0, np.int64)
        self._filters: dict[str, Any] = {}  # --where text -> its allowed rows (`rows_where`)
        self.passages = bool(getattr(store, "has_passages", False))  # one vector per passage
        self.prefixes = recorded_prefixes(meta)
        # documents held, where they differ from the vectors (a scan of the documents' keys, once)
        self._documents = store.document_count() if self.passages else None

    @classmethod
    def load(cls, path: str | Path, *, gpu: bool = False, device: str = "cpu") -> SearchIndex:
        """Open an index folder; a missing, truncated or corrupt file is an `InputError`.

        A load that overlaps an append reads the old or the new version, never a mix of both.
        `device` cuda or cuda:N (or `gpu`: GPU 0) searches with faiss on that GPU
        (`embedkit.index.faiss_gpu`); the model is opened apart, by `encoder()`.
        """
        path = Path(path)
        placement = placement_for(device, gpu)  # a GPU faiss cannot have: one line, before any reading
        folder, meta, index, store = load_consistent(
            path, index_files_dir, lambda folder: (folder, *cls._read_version(folder))
        )
        if placement is not None:
            try:
                index = placement.to_gpu(index, meta["kind"])
            except BaseException:
                store.close()
                raise
        return cls(path, meta, index, store, placement, folder)

    @property
    def faiss_device(self) -> str:
        """Where faiss searches: cpu or cuda:N."""
        return self._placement.name if self._placement is not None else "cpu"

    @property
    def version(self) -> str | None:
        """The version folder's name (`v-000003`), or None for an index of the flat layout."""
        return self.folder.name if self.folder != self.path else None

    def is_current(self) -> bool:
        """Whether the version read is still the one `CURRENT` names (an append or a rebuild
        since makes another one live). A file read: cheap enough for every request of a server."""
        return index_files_dir(self.path) == self.folder

    @staticmethod
    def _read_version(folder: Path) -> tuple[dict[str, Any], Any, DocStore]:
        return read_version(folder)  # the checks `verify` makes too

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def __len__(self) -> int:
        """Vector rows held (documents, or passages in an index of passages): the vectors less those
        of deleted documents still masked."""
        return int(self.index.ntotal) - len(self.masked)

    @property
    def document_count(self) -> int:
        """The documents held: `len()` is the vectors, one per passage in an index of passages."""
        return self._documents if self._documents is not None else len(self)

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    def search(
        self, query_vectors: np.ndarray, k: int = 10, where: str | None = None
    ) -> tuple[np.ndarray, list[list[str | None]]]:
        """Scores float32 [q, k] and doc ids [q][k] of each query's `k` nearest documents, best first.

        `query_vectors` is [q, dim] (or [dim]); it is L2-normalized here, so scores are cosine
        similarities whatever the caller passes. `k` is capped at the index's size; an id is None
        where fewer than `k` documents pass `where` (a metadata filter, `embedkit.index.where`) or
        an approximate index found fewer. An index of passages gives each document once, scored by
        its best passage.
        """
        allowed = self.restriction(where)
        if self.passages:
            best: list[dict[int, int]] = []
            ranked = dense_rankings(self, query_vectors, k, best, allowed=allowed)
            k = min(k, self.document_count)
            rows = np.full((len(ranked), k), -1, dtype=np.int64)
            scores = np.full((len(ranked), k), -np.inf, dtype=np.float32)
            for q, ranking in enumerate(ranked):
                for j, (doc, score) in enumerate(ranking[:k]):
                    rows[q, j], scores[q, j] = best[q][doc], score
        else:
            scores, rows = self._search_rows(query_vectors, k, restriction=allowed)
        ids = self.store.ids_of_rows(rows[rows >= 0].tolist())
        return scores, [[ids[int(r)] if r >= 0 else None for r in row] for row in rows]

    def restriction(self, where: str | None) -> Any:
        """What the search sides take for a metadata filter: here the allowed vector rows (sorted;
        None for no filter; every passage of an allowed document), computed once per expression
        (`embedkit.index.where`)."""
        if where is None:
            return None
        if where not in self._filters:
            from embedkit.index.where_sql import rows_where

            if len(self._filters) >= _FILTER_CACHE:
                self._filters.pop(next(iter(self._filters)))
            self._filters[where] = rows_where(self.store, where)
        return self._filters[where]

    def _search_rows(
        self, query_vectors: np.ndarray, k: int, *, restriction: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(f"query vectors of shape {queries.shape}; this index holds {self.dim}-d vectors")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        k = max(1, min(k, len(self)))
        if not len(queries) or not len(self) or (restriction is not None and not len(restriction)):
            return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        normalized = np.ascontiguousarray(l2_normalize(queries))
        params = self.meta["params"]
        scores, rows = search_rows(self.index, self.kind, normalized, k, restriction, self.masked, params)
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
        check_encoder_for(self.meta, encoder, f"the index {self.path}")

    makes_snippets = True  # the lexical side can highlight its matches (a remote collection cannot)

    @property
    def has_lexical(self) -> bool:
        return self.store.lexical is not None

    def no_lexical_reason(self) -> str:
        """Why lexical and hybrid search are refused here, and the command that adds the side."""
        fix = f"search it with --mode dense, or add one: `embedkit index --out {self.path} --reindex-lexical`"
        if self.meta.get("lexical") is not None:
            return f"the index {self.path} has the lexical side of an earlier embedkit: {fix}"
        return f"the index {self.path} has no lexical side (built with --no-lexical): {fix}"

    def default_mode(self, fusion: str | None = None) -> str:
        """hybrid where the index has a lexical side, unless its calibration chose dense (and no
        `fusion` is asked for); else dense."""
        return default_mode(self.meta, self.has_lexical, fusion)

    def default_fusion(self, fusion: str | None = None, alpha: float | None = None) -> tuple[str, float]:
        """The fusion and dense weight of a hybrid search: asked for, else the index's calibrated choice."""
        return fusion_for(self.meta, fusion, alpha)

    def search_text(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        encoder: Encoder | None = None,
        *,
        mode: str | None = None,  # dense, lexical or hybrid; None: `default_mode()`
        fusion: str | None = None,  # prf, zscore, rrf or minmax; None: `default_fusion()`
        alpha: float | None = None,  # the dense weight of zscore / minmax and of prf's first ranking
        depth: int | None = None,  # candidates per side before fusion (default: max(k, 100))
        snippets: bool = False,  # give each hit the lexical side matched a highlighted passage
        where: str | None = None,  # a metadata filter (`embedkit.index.where`), applied in each side
        passages: bool = False,  # give each hit its best passage (an index of passages)
    ) -> list[list[Hit]]:
        """Hits with their documents for each query, best first.

        dense: the index's model (or `encoder`) and FAISS; lexical: BM25 over title + text; hybrid:
        both, fused (`embedkit.index.fusion`; the default, prf, searches the dense side again with a
        query moved toward the top fused hits). A query with no lexical terms (stopwords,
        punctuation) is searched dense only in hybrid mode, and finds nothing in lexical mode.
        With `where`, each side searches only the documents that pass it, so fusion sees no other.
        Queries are embedded with the index's query prefix (`embedkit.encode.prefixes`); BM25
        sees them as given.
        """
        items = [queries] if isinstance(queries, str) else list(queries)
        mode = mode or self.default_mode(fusion)
        fusion, alpha = self.default_fusion(fusion, alpha)
        if mode not in SEARCH_MODES:
            raise InputError(f"unknown search mode {mode!r}: use {', '.join(SEARCH_MODES)}")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        check_fusion(fusion, alpha)
        if mode != "dense" and not self.has_lexical:
            raise InputError(self.no_lexical_reason())
        allowed = self.restriction(where)  # a bad expression fails here, before the model runs
        depth = max(k, depth or FUSION_DEPTH) if mode == "hybrid" else k
        lexical: list[list[tuple[int, float]]] = [[] for _ in items]
        dense: list[list[tuple[int, float]]] = [[] for _ in items]
        # in an index of passages, rankings are of document numbers; these give each one's best row
        best: list[dict[int, int]] = []
        lexical_best: list[dict[int, int]] = []
        first_lexical = start_lexical(self, items, depth, allowed) if mode != "dense" else None
        if mode == "lexical":
            lexical = lexical_rankings(self, items, depth, lexical_best, first_lexical(), allowed=allowed)
        else:
            # hybrid: BM25 runs on a second thread while the model encodes the queries (both leave
            # the GIL), so the lexical side costs little of a query's time
            pending = _lexical_thread().submit(first_lexical) if first_lexical is not None else None
            encoder = self._checked(encoder)
            vectors = encoder.encode(self.prefixes.queries(items), normalize=True).reshape(len(items), -1)
            dense = dense_rankings(self, vectors, depth, best, allowed=allowed)
            if pending is not None:
                first = pending.result()
                lexical = lexical_rankings(self, items, depth, lexical_best, first, allowed=allowed)
        best = best or [{} for _ in items]
        lexical_best = lexical_best or [{} for _ in items]
        if mode == "hybrid" and fusion == "prf":
            ranked = feedback_rankings(
                self, vectors, dense, lexical, k, alpha, encoder, best, lexical_best, allowed=allowed
            )
        else:
            ranked = [rank(mode, d, x, k, fusion, alpha) for d, x in zip(dense, lexical, strict=True)]
        return with_documents(
            self.store,
            ranked,
            queries=items if snippets and mode != "dense" and self.makes_snippets else None,
            passages=passages,
            best=best if self.passages else None,
            lexical_best=lexical_best,
        )

    def _checked(self, encoder: Encoder | None) -> Encoder:
        if encoder is None:
            return self.encoder()
        if encoder is not self._encoder:
            self.check_encoder(encoder)
        return encoder

    def vectors_of_rows(self, rows: Sequence[int], encoder: Encoder | None = None) -> np.ndarray:
        """The stored (normalised) vectors of `rows`, [len(rows), dim].

        Read back from FAISS where the index can reconstruct them (flat and HNSW exactly, IVF-PQ
        as its codes decode); else the documents are embedded again with `encoder`.
        """
        if not rows:
            return np.empty((0, self.dim), dtype=np.float32)
        wanted = np.asarray(rows, dtype=np.int64)
        try:
            return np.asarray(self.index.reconstruct_batch(wanted), dtype=np.float32)
        except RuntimeError:  # an IVF index without its direct map, or a GPU index
            pass
        try:
            import faiss

            ivf = faiss.extract_index_ivf(self.index)
            if self.store.has_deleted():  # labels with gaps: the array map needs 0..n-1
                ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
            else:
                ivf.make_direct_map()
            return np.asarray(self.index.reconstruct_batch(wanted), dtype=np.float32)
        except (RuntimeError, AttributeError):
            # what each row holds (its passage, in an index of passages), embedded as it was indexed
            held = self.store.passages_of_rows(list(rows)) if self.passages else {}
            documents = [held.get(r) for r in rows] if self.passages else self.store.by_rows(list(rows))
            texts = [doc.full_text if doc is not None else "" for doc in documents]
            texts = self.prefixes.passages(texts)
            return self._checked(encoder).encode(texts, normalize=True).reshape(len(texts), -1)

    def get_documents(self, ids: Sequence[str]) -> list[Document | None]:
        """Stored documents by id (None for an unknown id), in the order asked."""
        return self.store.by_ids(ids)


@functools.cache
def _lexical_thread() -> ThreadPoolExecutor:
    """The worker that runs hybrid search's BM25 side beside the query encoding (one per process)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedkit-bm25")


def open_index_for(path: str | Path, encoder: Encoder, *, gpu: bool = False) -> SearchIndex:
    """`SearchIndex.load(path)`, checked to hold vectors of `encoder`'s model (else an `InputError`)."""
    index = SearchIndex.load(path, gpu=gpu)
    try:
        index.check_encoder(encoder)
    except InputError:
        index.close()
        raise
    return index
