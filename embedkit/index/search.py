"""Searching an index folder: `SearchIndex` (vectors in, ids out; or texts in, hits out).

An index of passages (`embedkit.index.passages`) is searched the same way and answers with
documents: each side fetches enough passages that `depth` distinct documents come back, ranks a
document by its best passage (`best_per_document`), and hybrid fusion combines those document
scores. A hit's `row` is then its best passage's row, and `passage` that passage.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.encode.prefixes import recorded_prefixes
from embedkit.errors import InputError
from embedkit.index.docstore import DocStore
from embedkit.index.fusion import (
    DEFAULT_ALPHA,
    DEFAULT_FUSION,
    PRF_DOCS,
    check_fusion,
    feedback_query,
    fuse,
)
from embedkit.index.hits import Hit, hit_record, with_documents  # noqa: F401 (hit_record: its old home)
from embedkit.index.kinds import GpuPlacement
from embedkit.index.passages import fetch_size, rank_documents

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
from embedkit.index.lexical import lexical_settings
from embedkit.storage.versioned import verify_checksums

SEARCH_MODES = ("dense", "lexical", "hybrid")
# Each side's candidates before fusion: BEIR's evaluation depth, or k when k is larger.
FUSION_DEPTH = 100


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
        self.passages = bool(getattr(store, "has_passages", False))  # one vector per passage
        self.prefixes = recorded_prefixes(meta)

    @classmethod
    def load(cls, path: str | Path, *, gpu: bool = False) -> SearchIndex:
        """Open an index folder; a missing, truncated or corrupt file is an `InputError`.

        A load that overlaps an append reads the old or the new version, never a mix of both.
        """
        path = Path(path)
        folder, meta, index, store = load_consistent(
            path, index_files_dir, lambda folder: (folder, *cls._read_version(folder))
        )
        placement = GpuPlacement() if gpu else None
        if placement is not None:
            index = placement.to_gpu(index, meta["kind"])
        return cls(path, meta, index, store, placement, folder)

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
        verify_checksums(folder)  # every file of the version, as written (cached: cheap after once)
        meta = read_index_meta(folder)
        index = read_faiss(folder / INDEX_FILE, meta)
        recorded = meta.get("lexical")
        store = DocStore.open(folder / DOCS_FILE, lexical=lexical_settings(recorded))
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
    def document_count(self) -> int:
        """The documents held: `len()` is the vectors, one per passage in an index of passages."""
        recorded = self.meta.get("documents")
        return int(recorded) if self.passages and recorded is not None else len(self)

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
        where an approximate index found fewer than `k` documents. An index of passages gives each
        document once, scored by its best passage.
        """
        if self.passages:
            best: list[dict[int, int]] = []
            ranked = self._dense_rankings(query_vectors, k, best)
            k = min(k, self.document_count)
            rows = np.full((len(ranked), k), -1, dtype=np.int64)
            scores = np.full((len(ranked), k), -np.inf, dtype=np.float32)
            for q, ranking in enumerate(ranked):
                for j, (doc, score) in enumerate(ranking[:k]):
                    rows[q, j], scores[q, j] = best[q][doc], score
        else:
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

    @property
    def has_lexical(self) -> bool:
        return self.store.lexical is not None

    def no_lexical_reason(self) -> str:
        """Why lexical and hybrid search are refused here, and the command that adds the side."""
        fix = f"search it with --mode dense, or add one: `embedkit index --out {self.path} --reindex-lexical`"
        if self.meta.get("lexical") is not None:
            return f"the index {self.path} has the lexical side of an earlier embedkit: {fix}"
        return f"the index {self.path} has no lexical side (built with --no-lexical): {fix}"

    def default_mode(self) -> str:
        """hybrid where the index has a lexical side (the measured best), else dense."""
        return "hybrid" if self.has_lexical else "dense"

    def search_text(
        self,
        queries: str | Sequence[str],
        k: int = 10,
        encoder: Encoder | None = None,
        *,
        mode: str | None = None,  # dense, lexical or hybrid; None: `default_mode()`
        fusion: str = DEFAULT_FUSION,  # prf, zscore, rrf or minmax (embedkit.index.fusion)
        alpha: float = DEFAULT_ALPHA,  # the dense weight of zscore / minmax and of prf's first ranking
        depth: int | None = None,  # candidates per side before fusion (default: max(k, 100))
        snippets: bool = False,  # give each hit the lexical side matched a highlighted passage
        passages: bool = False,  # give each hit its best passage (an index of passages)
    ) -> list[list[Hit]]:
        """Hits with their documents for each query, best first.

        dense: the index's model (or `encoder`) and FAISS; lexical: BM25 over title + text; hybrid:
        both, fused (`embedkit.index.fusion`; the default, prf, searches the dense side again with a
        query moved toward the top fused hits). A query with no lexical terms (stopwords,
        punctuation) is searched dense only in hybrid mode, and finds nothing in lexical mode.
        Queries are embedded with the index's query prefix (`embedkit.encode.prefixes`); BM25
        sees them as given.
        """
        items = [queries] if isinstance(queries, str) else list(queries)
        mode = mode or self.default_mode()
        if mode not in SEARCH_MODES:
            raise InputError(f"unknown search mode {mode!r}: use {', '.join(SEARCH_MODES)}")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        check_fusion(fusion, alpha)
        if mode != "dense" and not self.has_lexical:
            raise InputError(self.no_lexical_reason())
        depth = max(k, depth or FUSION_DEPTH) if mode == "hybrid" else k
        lexical: list[list[tuple[int, float]]] = [[] for _ in items]
        dense: list[list[tuple[int, float]]] = [[] for _ in items]
        # in an index of passages, rankings are of document numbers; these give each one's best row
        best: list[dict[int, int]] = []
        lexical_best: list[dict[int, int]] = []
        fetch = self._fetch_size(depth)
        if mode == "lexical":
            lexical = self._lexical_rankings(
                items, depth, lexical_best, self.store.search_lexical(items, fetch)
            )
        else:
            # hybrid: BM25 runs on a second thread while the model encodes the queries (both leave
            # the GIL), so the lexical side costs little of a query's time
            pending = (
                _lexical_thread().submit(self.store.search_lexical, items, fetch)
                if mode == "hybrid"
                else None
            )
            encoder = self._checked(encoder)
            vectors = encoder.encode(self.prefixes.queries(items), normalize=True).reshape(len(items), -1)
            dense = self._dense_rankings(vectors, depth, best)
            if pending is not None:
                lexical = self._lexical_rankings(items, depth, lexical_best, pending.result())
        best = best or [{} for _ in items]
        lexical_best = lexical_best or [{} for _ in items]
        if mode == "hybrid" and fusion == "prf":
            ranked = self._feedback_rankings(
                items, vectors, dense, lexical, k, alpha, encoder, best, lexical_best
            )
        else:
            ranked = [self._rank(mode, d, x, k, fusion, alpha) for d, x in zip(dense, lexical, strict=True)]
        return with_documents(
            self.store,
            ranked,
            queries=items if snippets and mode != "dense" else None,
            passages=passages,
            best=best if self.passages else None,
            lexical_best=lexical_best,
        )

    def _fetch_size(self, depth: int) -> int:
        return fetch_size(depth, len(self), self.document_count) if self.passages else depth

    def _by_document(
        self,
        fetch: Callable[[int], list[list[tuple[int, float]]]],
        depth: int,
        best: list[dict[int, int]] | None,
        first: list[list[tuple[int, float]]] | None = None,
    ) -> list[list[tuple[int, float]]]:
        size = self._fetch_size(depth)
        return rank_documents(fetch, depth, size, len(self), self.store.documents_of_rows, best, first)

    def _lexical_rankings(
        self,
        items: list[str],
        depth: int,
        best: list[dict[int, int]],
        first: list[list[tuple[int, float]]],
    ) -> list[list[tuple[int, float]]]:
        """BM25 rankings (`first`: at `_fetch_size(depth)`), of documents in an index of passages."""
        if not self.passages:
            return first
        return self._by_document(lambda n: self.store.search_lexical(items, n), depth, best, first)

    def _checked(self, encoder: Encoder | None) -> Encoder:
        if encoder is None:
            return self.encoder()
        if encoder is not self._encoder:
            self.check_encoder(encoder)
        return encoder

    def _dense_rankings(
        self, vectors: np.ndarray, depth: int, best: list[dict[int, int]] | None = None
    ) -> list[list[tuple[int, float]]]:
        """Each query's best `depth` rows (documents, in an index of passages) by cosine."""

        def fetch(size: int) -> list[list[tuple[int, float]]]:
            scores, rows = self._search_rows(vectors, size)  # (Q, size) each
            return [
                [(int(r), float(v)) for r, v in zip(row, vals, strict=True) if r >= 0]
                for row, vals in zip(rows.tolist(), scores.tolist(), strict=True)
            ]

        return self._by_document(fetch, depth, best) if self.passages else fetch(depth)

    def _feedback_rankings(
        self,
        texts: list[str],
        vectors: np.ndarray,
        dense: list[list[tuple[int, float]]],
        lexical: list[list[tuple[int, float]]],
        k: int,
        alpha: float,
        encoder: Encoder,
        best: list[dict[int, int]],
        lexical_best: list[dict[int, int]],
    ) -> list[list[Hit]]:
        """prf (`embedkit.index.fusion`): the dense side searched again with each query's feedback vector.

        Scores are the feedback query's cosines; `dense_score` / `lexical_score` are the first
        searches' scores of the rows they returned. In an index of passages the rankings are of
        documents, and a feedback document's vector is its best passage's (the dense side's best,
        else the lexical side's first passage).
        """
        firsts = [
            [f.row for f in fuse(d, x, PRF_DOCS, alpha=alpha)] if x else []
            for d, x in zip(dense, lexical, strict=True)
        ]
        if self.passages:
            firsts = [
                [b.get(doc, x.get(doc, -1)) for doc in docs]
                for docs, b, x in zip(firsts, best, lexical_best, strict=True)
            ]
        feedback_rows = sorted({row for rows in firsts for row in rows})
        stored = dict(zip(feedback_rows, self.vectors_of_rows(feedback_rows, encoder), strict=True))
        moved = np.stack(
            [
                feedback_query(vector, np.stack([stored[r] for r in rows])) if rows else vector
                for vector, rows in zip(vectors, firsts, strict=True)
            ]
        )
        again_best: list[dict[int, int]] = []
        again = self._dense_rankings(moved, k, again_best if self.passages else None)
        for q, rows in enumerate(again_best):  # the final ranking's best passages, over the first's
            best[q].update(rows)
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

            faiss.extract_index_ivf(self.index).make_direct_map()
            return np.asarray(self.index.reconstruct_batch(wanted), dtype=np.float32)
        except (RuntimeError, AttributeError):
            documents = self.store.by_rows(list(rows))
            texts = [doc.full_text if doc is not None else "" for doc in documents]
            return self._checked(encoder).encode(texts, normalize=True).reshape(len(texts), -1)

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
