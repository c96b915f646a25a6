"""Searching an index folder: `SearchIndex` (vectors in, ids out; or texts in, hits out)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.errors import InputError
from embedkit.index.calibration import default_mode, fusion_for
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.fusion import (
    PRF_DOCS,
    check_fusion,
    feedback_query,
    fuse,
)

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.encode.protocol import Encoder

from embedkit.index.folder import (
    DOCS_FILE,
    INDEX_FILE,
    META_FILE,
    check_encoder_for,
    index_files_dir,
    open_model_for,
    read_faiss,
    read_index_meta,
)
from embedkit.index.integrity import check_scores, load_consistent
from embedkit.index.lexical import lexical_settings
from embedkit.index.rows import search_rows
from embedkit.storage.versioned import verify_checksums

SEARCH_MODES = ("dense", "lexical", "hybrid")
# Each side's candidates before fusion: BEIR's evaluation depth, or k when k is larger.
FUSION_DEPTH = 100
_FILTER_CACHE = 32  # metadata filters whose allowed rows a loaded index keeps (a server's repeats)


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


def hit_record(rank: int, hit: Hit) -> dict[str, Any]:
    """One hit as JSON, the same for `embedkit search --json` and the server's `/search`.

    `dense_score` and `lexical_score` are always present (null where that side did not return the
    hit); `snippet` where one was made; `title`, `text` and `metadata` where the document is known.
    """
    record: dict[str, Any] = {"rank": rank, "id": hit.id, "score": float(hit.score)}
    record["dense_score"] = None if hit.dense_score is None else float(hit.dense_score)
    record["lexical_score"] = None if hit.lexical_score is None else float(hit.lexical_score)
    if hit.snippet is not None:
        record["snippet"] = hit.snippet
    if hit.document is not None:
        record.update(title=hit.document.title, text=hit.document.text, metadata=hit.document.metadata or {})
    return record


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
        # every file of the version, as written (cached: cheap after once), those it opens listed
        verify_checksums(folder, required=(META_FILE, INDEX_FILE, DOCS_FILE))
        meta = read_index_meta(folder)
        index = read_faiss(folder / INDEX_FILE, meta)
        recorded = meta.get("lexical")
        store = DocStore.open(folder / DOCS_FILE, lexical=lexical_settings(recorded))
        # every vector is a document's, or a deleted document's that is masked (`embedkit.index.rows`)
        held = store.count() + len(store.masked_rows()) if store.has_deleted() else store.next_row()
        if held != index.ntotal:
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
        """Documents (rows) held: the vectors less those of deleted documents still masked."""
        return int(self.index.ntotal) - len(self.masked)

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
        where fewer than `k` documents pass `where` (a metadata filter, `embedkit.index.where`).
        """
        scores, rows = self._search_rows(query_vectors, k, restriction=self.restriction(where))
        ids = self.store.ids_of_rows(rows[rows >= 0].tolist())
        return scores, [[ids[int(r)] if r >= 0 else None for r in row] for row in rows]

    def restriction(self, where: str | None) -> Any:
        """What the search sides take for a metadata filter: here the allowed rows (sorted; None
        for no filter), computed once per expression (`embedkit.index.where`)."""
        if where is None:
            return None
        if where not in self._filters:
            from embedkit.index.where import rows_where

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
    ) -> list[list[Hit]]:
        """Hits with their documents for each query, best first.

        dense: the index's model (or `encoder`) and FAISS; lexical: BM25 over title + text; hybrid:
        both, fused (`embedkit.index.fusion`; the default, prf, searches the dense side again with a
        query moved toward the top fused hits). A query with no lexical terms (stopwords,
        punctuation) is searched dense only in hybrid mode, and finds nothing in lexical mode.
        With `where`, each side searches only the documents that pass it, so fusion sees no other.
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
        if mode == "lexical":
            lexical = self.store.search_lexical(items, depth, allowed)
        else:
            # hybrid: BM25 runs on a second thread while the model encodes the queries (both leave
            # the GIL), so the lexical side costs little of a query's time
            pending = (
                _lexical_thread().submit(self.store.search_lexical, items, depth, allowed)
                if mode == "hybrid"
                else None
            )
            encoder = self._checked(encoder)
            vectors = encoder.encode(items, normalize=True).reshape(len(items), -1)
            dense = self._dense_rankings(vectors, depth, allowed=allowed)
            lexical = pending.result() if pending is not None else lexical
        if mode == "hybrid" and fusion == "prf":
            ranked = self._feedback_rankings(
                items, vectors, dense, lexical, k, alpha, encoder, allowed=allowed
            )
        else:
            ranked = [self._rank(mode, d, x, k, fusion, alpha) for d, x in zip(dense, lexical, strict=True)]
        found = sorted({h.row for hits in ranked for h in hits})
        docs = dict(zip(found, self.store.by_rows(found), strict=True))
        results = [[replace(h, id=docs[h.row].id, document=docs[h.row]) for h in hits] for hits in ranked]
        if snippets and mode != "dense":
            results = [self._with_snippets(text, hits) for text, hits in zip(items, results, strict=True)]
        return results

    def _checked(self, encoder: Encoder | None) -> Encoder:
        if encoder is None:
            return self.encoder()
        if encoder is not self._encoder:
            self.check_encoder(encoder)
        return encoder

    def _dense_rankings(
        self, vectors: np.ndarray, depth: int, *, allowed: Any = None
    ) -> list[list[tuple[int, float]]]:
        scores, rows = self._search_rows(vectors, depth, restriction=allowed)  # (Q, depth) each
        return [
            [(int(r), float(v)) for r, v in zip(row, vals, strict=True) if r >= 0]
            for row, vals in zip(rows.tolist(), scores.tolist(), strict=True)
        ]

    def _feedback_rankings(
        self,
        texts: list[str],
        vectors: np.ndarray,
        dense: list[list[tuple[int, float]]],
        lexical: list[list[tuple[int, float]]],
        k: int,
        alpha: float,
        encoder: Encoder,
        *,
        allowed: Any = None,  # `restriction(where)`
    ) -> list[list[Hit]]:
        """prf (`embedkit.index.fusion`): the dense side searched again with each query's feedback vector.

        Scores are the feedback query's cosines; `dense_score` / `lexical_score` are the first
        searches' scores of the rows they returned.
        """
        firsts = [
            [f.row for f in fuse(d, x, PRF_DOCS, alpha=alpha)] if x else []
            for d, x in zip(dense, lexical, strict=True)
        ]
        feedback_rows = sorted({row for rows in firsts for row in rows})
        stored = dict(zip(feedback_rows, self.vectors_of_rows(feedback_rows, encoder), strict=True))
        moved = np.stack(
            [
                feedback_query(vector, np.stack([stored[r] for r in rows])) if rows else vector
                for vector, rows in zip(vectors, firsts, strict=True)
            ]
        )
        again = self._dense_rankings(moved, k, allowed=allowed)
        ranked = []
        for final, d, x, rows in zip(again, dense, lexical, firsts, strict=True):
            if not rows:  # no lexical hits: the dense ranking stands
                ranked.append([Hit("", s, r, dense_score=s) for r, s in d[:k]])
                continue
            dense_of, lexical_of = dict(d), dict(x)
            ranked.append(
                [
                    Hit("", s, r, dense_score=dense_of.get(r), lexical_score=lexical_of.get(r))
                    for r, s in final
                ]
            )
        return ranked

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
            documents = self.store.by_rows(list(rows))
            texts = [doc.full_text if doc is not None else "" for doc in documents]
            return self._checked(encoder).encode(texts, normalize=True).reshape(len(texts), -1)

    def _with_snippets(self, query: str, hits: list[Hit]) -> list[Hit]:
        """The hits, those the lexical side matched with a snippet of their title + text."""
        assert self.store.lexical is not None
        matched = [h for h in hits if h.lexical_score is not None and h.document is not None]
        passages = self.store.lexical.snippets(query, [h.document.full_text for h in matched])  # type: ignore[union-attr]
        by_row = {h.row: passage for h, passage in zip(matched, passages, strict=True)}
        return [replace(h, snippet=by_row.get(h.row)) for h in hits]

    @staticmethod
    def _rank(
        mode: str,
        dense: list[tuple[int, float]],
        lexical: list[tuple[int, float]],
        k: int,
        fusion: str,
        alpha: float,
    ) -> list[Hit]:
        if mode == "lexical":  # no lexical terms: no hits, as asked (never dense ones instead)
            return [Hit("", s, r, lexical_score=s) for r, s in lexical[:k]]
        if mode == "dense" or not lexical:  # hybrid with no lexical terms: the dense ranking stands
            return [Hit("", s, r, dense_score=s) for r, s in dense[:k]]
        return [
            Hit("", f.score, f.row, dense_score=f.dense_score, lexical_score=f.lexical_score)
            for f in fuse(dense, lexical, k, method=fusion, alpha=alpha)
        ]

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
