"""An index folder as the search pipeline reaches it: FAISS, the SQLite documents, the tantivy BM25 side.

`LocalStore` is the index folder's `embedkit.search.store.SearchStore`, composed of the three parts
one version folder holds: the FAISS index (`vectors`), the document store (`docs`,
`embedkit.index.docstore`) and its lexical side (`embedkit.index.lexical`). A metadata filter is
compiled to the allowed rows (`embedkit.index.where`), kept for the last `FILTER_CACHE` expressions.

Search among some rows (a metadata filter, or the rows not masked after a deletion) uses faiss's
ID selectors (`SearchParameters(sel=...)`), so it returns `k` hits whenever `k` rows are allowed,
filtered or not: flat search is exact; an HNSW search looks at `max(efSearch, k)` candidates (its
answers come from that list, as FAISS's own guidance says to size it); an HNSW or IVF search that
finds fewer is repeated with a wider search
(efSearch or nprobe x 4, up to the whole index), and an HNSW search that still falls short is
answered by an exact search over the allowed rows.

Vectors in an index are unit length, so every score is a cosine in [-1, 1] (an IVF-PQ index's
approximate scores stray a little); a score beyond that, or NaN, can only come from a damaged
index file, and is an `InputError`, not a result (`check_scores`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.document import Document, TextSpan
from embedkit.encode.batching import l2_normalize
from embedkit.errors import InputError
from embedkit.index.docstore import DocStore
from embedkit.index.folder import (
    index_files_dir,
)
from embedkit.index.integrity import load_consistent, read_version
from embedkit.index.kinds import HNSW_EF_SEARCH, SCORE_OVERSHOOT, FaissIndex, faiss_module
from embedkit.index.lexical import term_spans
from embedkit.index.quantized import (
    RESCORE,
    first_pass_queries,
    open_full_vectors,
    quantization,
    rescore_candidates,
    rescored,
)
from embedkit.index.rows import labels
from embedkit.index.where_sql import rows_where
from embedkit.search.fusion import bounded_k

Ranking = list[tuple[int, float]]
FILTER_CACHE = 32  # metadata filters whose allowed rows a loaded index keeps (a server's repeats)
WIDEN = 4  # efSearch / nprobe factor when a filtered search found too few


# A few queries search on one thread where the work is small: faiss splits even one query's scan
# over OpenMP threads, and when another process holds a core the split waits for it. Measured on
# the 2-core machine with another job running, one query: a 4,000-vector binary flat index 23 ms
# on 2 threads, 0.03 ms on 1; a 20,000-vector float flat index 17 ms and 1.5 ms; HNSW 0.07 ms on
# either (a graph visits few vectors).
SERIAL_QUERIES = 20  # faiss's own small-batch threshold (`distance_compute_blas_threshold`)
SERIAL_SCAN_BYTES = 64 * 2**20  # codes one core scans in a few milliseconds; above, the threads pay


# (query rows, k, allowed rows) -> (scores, rows): an exact search of those queries among those rows
ExactFallback = Callable[[np.ndarray, int, np.ndarray], tuple[np.ndarray, np.ndarray]]


@contextmanager
def search_threads(index: FaissIndex, kind: str, queries: int) -> Iterator[None]:
    """Search `queries` on one OpenMP thread where that is faster (`SERIAL_QUERIES`): graph and
    inverted-list searches, and exact scans of at most `SERIAL_SCAN_BYTES`. The setting is the
    calling thread's own (OpenMP's), so concurrent searches of a server do not share it."""
    # faiss 1.8 to 1.15: flat and quantized indexes have `code_size`, graph indexes (HNSW) not
    scanned = int(index.ntotal) * int(getattr(index, "code_size", 4 * index.d))
    if queries >= SERIAL_QUERIES or (kind == "flat" and scanned > SERIAL_SCAN_BYTES):
        yield
        return
    import faiss  # imported with the index this searches; calling faiss_module() would add a stop

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


class LocalStore:
    """One version folder's FAISS index, documents and BM25 side, searched by row."""

    def __init__(
        self, meta: dict[str, Any], vectors: Any, docs: DocStore, path: Path, folder: Path | None = None
    ) -> None:
        self.meta = meta
        self.vectors = vectors  # the faiss.Index (on a GPU when the index was loaded there)
        self.docs = docs
        self.path = path  # the index folder, as errors name it
        self.folder = folder or path  # the version folder the files were read from
        self.dim = int(meta["dim"])
        self.kind = str(meta["kind"])
        self.masked = docs.deletions.masked_rows()  # deleted rows whose vectors are still in FAISS
        self.passages = docs.has_passages
        self.has_lexical = docs.lexical is not None
        # documents held, where they differ from the vectors (a scan of the documents' keys, once)
        self._documents = docs.document_count() if self.passages else None
        self._filters: dict[str, np.ndarray] = {}  # filter text -> its allowed rows
        self.quantize = quantization(meta["params"])  # int8 or binary codes, rescored (`quantized`)
        # a quantized index's float32 vectors by row, memory-mapped (None: FAISS holds floats)
        self.full = open_full_vectors(self.folder, self.dim, docs.next_row()) if self.quantize else None

    @classmethod
    def open(cls, path: str | Path) -> LocalStore:
        """The live version of the index folder `path`. A load that overlaps an append reads the
        old or the new version, never a mix of both."""
        path = Path(path)
        return load_consistent(path, index_files_dir, lambda folder: cls.read(folder, path))

    @classmethod
    def read(cls, folder: Path, path: Path) -> LocalStore:
        """The version folder `folder` of the index `path`, its files checked (a missing, truncated
        or corrupt file is an `InputError`)."""
        meta, vectors, docs = read_version(folder)  # the checks `verify` makes too
        return cls(meta, vectors, docs, path, folder)

    def __len__(self) -> int:
        """Vector rows held: the vectors less those of deleted documents still masked."""
        return int(self.vectors.ntotal) - len(self.masked)

    def close(self) -> None:
        self.docs.close()

    def document_count(self) -> int:
        return self._documents if self._documents is not None else len(self)

    def compile_filter(self, where: str) -> np.ndarray:
        """The allowed vector rows of `where` (sorted; every passage of an allowed document)."""
        if where not in self._filters:
            if len(self._filters) >= FILTER_CACHE:
                self._filters.pop(next(iter(self._filters)))
            self._filters[where] = rows_where(self.docs, where)
        return self._filters[where]

    def rows_by_id(self, ids: Sequence[str]) -> dict[str, list[int]]:
        """Every vector row of each document of `ids` held (its passages' rows), ascending."""
        return self.docs.rows_by_id(ids)

    def held_rows(self) -> np.ndarray:
        """Every vector row that holds a document (or a passage), ascending: a listing's order."""
        return np.asarray(self.docs.rows_between(0, self.docs.next_row()), dtype=np.int64)

    def reachable(self, allowed: np.ndarray | None) -> int:
        return len(self) if allowed is None else min(len(self), len(allowed))

    def search_dense(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None) -> list[Ranking]:
        scores, rows = self.dense_arrays(vectors, k, allowed)
        return [
            [(int(r), float(v)) for r, v in zip(row, vals, strict=True) if r >= 0]
            for row, vals in zip(rows.tolist(), scores.tolist(), strict=True)
        ]

    def dense_arrays(
        self, vectors: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """faiss's (scores, rows), [q, min(k, len)] each, padded with rows -1 where fewer are allowed."""
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(f"query vectors of shape {queries.shape}; this index holds {self.dim}-d vectors")
        k = bounded_k(k, len(self))
        if not len(queries) or not len(self) or (allowed is not None and not len(allowed)):
            return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        normalized = np.ascontiguousarray(l2_normalize(queries))
        params = self.meta["params"]
        with search_threads(self.vectors, self.kind, len(normalized)):
            if self.full is not None:
                return self._rescored(normalized, k, allowed)
            scores, rows = search_rows(self.vectors, self.kind, normalized, k, allowed, self.masked, params)
        check_scores(scores, rows, self.meta, self.path)
        return scores, rows

    def _rescored(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """A quantized index's search: `RESCORE` x k candidates by their codes, the best k of them
        by exact cosine against the float vectors (`embedkit.index.quantized`)."""
        assert self.full is not None
        rescore = int(self.meta["params"].get("rescore", RESCORE[str(self.quantize)]))
        wide = rescore_candidates(k, rescore, len(self))
        first = first_pass_queries(self.vectors, queries)
        exact = _full_exact(self.full, queries) if self.kind == "hnsw" else None
        _, candidates = search_rows(
            self.vectors, self.kind, first, wide, allowed, self.masked, self.meta["params"], exact
        )
        scores, rows = rescored(queries, candidates, self.full, k)
        check_scores(scores, rows, self.meta, self.path)
        return scores, rows

    def search_lexical(self, texts: Sequence[str], k: int, allowed: np.ndarray | None) -> list[Ranking]:
        if self.docs.lexical is None:
            raise InputError(f"{self.path} has no lexical index")
        return self.docs.lexical.search(texts, k, allowed)

    def vectors_of_rows(self, rows: Sequence[int]) -> np.ndarray | None:
        """Read back from FAISS where the index can reconstruct them (flat and HNSW exactly, IVF-PQ
        as its codes decode); None for a GPU index or one without a direct map to make."""
        if not len(rows):
            return np.empty((0, self.dim), dtype=np.float32)
        wanted = np.asarray(rows, dtype=np.int64)
        if self.full is not None:  # a quantized index: its float vectors, not decoded codes
            return np.asarray(self.full[wanted], dtype=np.float32)
        try:
            return np.asarray(self.vectors.reconstruct_batch(wanted), dtype=np.float32)
        except RuntimeError:  # an IVF index without its direct map, or a GPU index
            pass
        try:
            ivf = faiss_module().extract_index_ivf(self.vectors)
            if self.docs.deletions.any():  # labels with gaps: the array map needs 0..n-1
                ivf.set_direct_map_type(faiss_module().DirectMap.Hashtable)
            else:
                ivf.make_direct_map()
            return np.asarray(self.vectors.reconstruct_batch(wanted), dtype=np.float32)
        except (RuntimeError, AttributeError):
            return None

    def held_at(self, rows: Sequence[int]) -> dict[int, TextSpan]:
        return self.docs.held_at(rows)

    def document_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        return self.docs.document_numbers(rows)

    def documents_by_id(self, ids: Sequence[str]) -> list[Document | None]:
        return self.docs.by_ids(ids)

    def term_spans(self, text: str) -> list[tuple[str, int, int]]:
        return term_spans(text, self.docs.lexical.settings if self.docs.lexical is not None else None)

    def term_idf(self, terms: Sequence[str]) -> dict[str, float]:
        return self.docs.lexical.term_idf(terms) if self.docs.lexical is not None else {}


def check_scores(scores: np.ndarray, rows: np.ndarray, meta: dict[str, Any], path: Path) -> None:
    """An `InputError` when a normalized index returns a score that is not a cosine."""
    if not meta.get("normalized", True) or scores.size == 0:
        return
    found = scores[rows >= 0]
    bound = 1 + SCORE_OVERSHOOT.get(str(meta.get("kind")), 1.0)
    if found.size and (not np.all(np.isfinite(found)) or float(np.max(np.abs(found))) > bound):
        worst = float(np.max(np.abs(np.nan_to_num(found, nan=np.inf))))
        raise InputError(
            f"the index {path} returned a score of {worst:.3g}, impossible for unit vectors "
            "(cosine in [-1, 1]): its index file is corrupt; rebuild the index"
        )


def search_rows(
    index: FaissIndex,
    kind: str,
    queries: np.ndarray,
    k: int,
    allowed: np.ndarray | None,
    masked: np.ndarray,
    params: dict[str, Any],
    exact: ExactFallback | None = None,  # HNSW's fallback; None: `_exact`
) -> tuple[np.ndarray, np.ndarray]:
    """faiss's (scores, rows) [q, k] of normalised `queries`, among the `allowed` rows (sorted; None:
    all) and never the `masked` ones; padded with row -1 only where fewer than `k` rows are allowed.
    A binary index's `queries` are their codes, its scores Hamming distances."""
    selector = None  # every row
    available = int(index.ntotal)
    # an unfiltered IVF search as the index is set (on a GPU too), before any widening
    plain: tuple[np.ndarray, np.ndarray] | None = None
    if allowed is None and not len(masked) and kind != "hnsw":
        plain = index.search(queries, k)
        if kind == "flat" or ((plain[1] >= 0).sum(axis=1) >= min(k, available)).all():
            return plain
    faiss = faiss_module()
    if allowed is not None:
        selector = faiss.IDSelectorBatch(np.ascontiguousarray(allowed, dtype=np.int64))
        available = len(allowed)
    elif len(masked):
        selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(np.ascontiguousarray(masked)))
        available = int(index.ntotal) - len(masked)
    want = min(k, available)
    width = int(params.get("ef_search", HNSW_EF_SEARCH)) if kind == "hnsw" else int(params.get("nprobe", 1))
    limit = int(index.ntotal) if kind == "hnsw" else int(params.get("nlist", 1))
    while True:
        try:
            scores, rows = index.search(queries, k, params=_parameters(kind, selector, width, k))
        except RuntimeError as exc:  # a faiss build or device without ID selectors for this index
            if plain is not None:  # nor per-search parameters: the index's own answer stands
                return plain
            reason = str(exc).strip().splitlines()[-1]
            where = "faiss on the CPU: --device auto or cpu?"
            raise InputError(f"this index cannot search among some rows ({where}): {reason}") from None
        short = (rows >= 0).sum(axis=1) < want
        if kind == "flat" or not short.any() or width >= limit:
            break
        width = min(limit, width * WIDEN)
    if kind == "hnsw" and short.any():
        rows_allowed = allowed if allowed is not None else np.setdiff1d(labels(index), masked)
        exact_scores, exact_rows = (
            _exact(index, queries[short], k, rows_allowed) if exact is None else exact(short, k, rows_allowed)
        )
        scores[short], rows[short] = exact_scores, exact_rows
    return scores, rows


def _parameters(kind: str, selector: Any, width: int, k: int) -> Any:  # faiss.IDSelector -> SearchParameters
    """The search's parameters: HNSW's efSearch at least k (its candidate list is where the k
    results come from: 64 candidates cannot give 1,000 hits), IVF's nprobe; `selector` None: all."""
    faiss = faiss_module()
    chosen = {} if selector is None else {"sel": selector}
    if kind == "hnsw":
        return faiss.SearchParametersHNSW(efSearch=max(width, k), **chosen)
    if kind == "ivf-pq":
        return faiss.SearchParametersIVF(nprobe=width, **chosen)
    return faiss.SearchParameters(**chosen)


def _full_exact(full: np.ndarray, queries: np.ndarray) -> ExactFallback:
    """HNSW's exact fallback for a quantized index: cosines against its float vectors by row."""

    def exact(which: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _top(queries[which], np.asarray(full[np.sort(rows)], np.float32), np.sort(rows), k)

    return exact


def _exact(index: FaissIndex, queries: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k over the stored vectors of `rows` (HNSW stores them unencoded)."""
    vectors = np.asarray(index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64)), np.float32)
    return _top(queries, vectors, rows, k)


def _top(queries: np.ndarray, vectors: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` of `rows` (their `vectors`) for each query by inner product, padded with -1
    (`embedkit.search.exact`'s tie rule: among equal scores the lower row)."""
    from embedkit.search.exact import exact_top_k

    found_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    found_rows = np.full((len(queries), k), -1, dtype=np.int64)
    if len(rows) and len(queries):
        scores, columns = exact_top_k(queries, vectors, k, tie_rank=rows)
        found_scores[:, : columns.shape[1]] = scores
        found_rows[:, : columns.shape[1]] = rows[columns]
    return found_scores, found_rows
