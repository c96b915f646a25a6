"""FAISS index kinds: which kind a corpus gets and its parameters (on a GPU: `embedkit.index.faiss_gpu`).

`auto` picks exact flat search under `AUTO_FLAT_MAX` vectors, HNSW above, and IVF-PQ when an HNSW
index would take more than half of this machine's memory (or on the GPU, where faiss has no HNSW).
The HNSW defaults were chosen by `benchmarks/search.py` (see benchmarks/README.md).
"""

from __future__ import annotations

import math
import os
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np

from embedkit.errors import InputError

BUILT_KINDS = ("flat", "hnsw", "ivf-pq")  # what an index is; recorded in embedkit-index.json
KINDS = ("auto", *BUILT_KINDS)  # what a build may ask for
# How far above 1 a kind's cosine scores may go before the index is called damaged: float32
# inner products of stored unit vectors overshoot by ~1e-6 (flat, HNSW); IVF-PQ scores against a
# 4-bit-per-dimension reconstruction, which is not unit length and measured up to 1.1 here.
SCORE_OVERSHOOT = {"flat": 1e-3, "hnsw": 1e-3, "ivf-pq": 1.0}

# Below ~100k vectors exact search is fast enough (benchmarks/search.py) and loses no recall.
AUTO_FLAT_MAX = 100_000
# HNSW defaults, chosen with benchmarks/search.py on 100k clustered 384-d vectors (benchmarks/README.md).
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 64
# IVF-PQ: k-means wants >= 39 training points per centroid, and PQ trains 256 centroids per sub-vector.
IVF_PQ_MIN_DOCS = 39 * 256
IVF_NPROBE = 16  # lists scanned per query: faiss wiki's usual starting point for nlist ~ 4 sqrt(n)
PQ_DIMS_PER_BYTE = 8  # 384-d float32 (1536 B) -> 48 B per vector, 32x smaller


# A faiss index of any kind: float or binary (faiss.IndexBinary is no faiss.Index), on the CPU or a GPU,
# its class known only at run time. faiss's stubs declare no base with the calls made across kinds.
FaissIndex: TypeAlias = Any


def faiss_module() -> ModuleType:  # imported on first use
    try:
        import faiss
    except ImportError:
        from embedkit.extras import missing_extra_message

        raise InputError(missing_extra_message("cpu", "a vector index", ["faiss"])) from None
    return faiss


# --- index kinds ---------------------------------------------------------------------------------


def hnsw_bytes(count: int, dim: int, m: int = HNSW_M) -> int:
    """Rough size of an HNSW index: the vectors, 2M level-0 links, and the upper levels' share."""
    return count * (4 * dim + 8 * m + 16)


def choose_kind(
    kind: str, count: int, dim: int, *, on_gpu: bool = False, memory: int | None = None
) -> tuple[str, str]:
    """The kind to build for `count` vectors and why; `auto` decides by size and `memory` (bytes),
    and by where faiss builds (`on_gpu`: `Runtime.faiss_gpu` is not None)."""
    if kind not in KINDS:
        raise InputError(f"unknown index kind {kind!r}: use {', '.join(KINDS)}")
    if kind == "hnsw" and on_gpu:
        raise InputError(
            "faiss has no GPU HNSW index: use --kind flat or ivf-pq with faiss on the GPU, or build HNSW "
            "with faiss on the CPU (--device auto or cpu)"
        )
    if kind != "auto":
        return kind, "asked for"
    if count < AUTO_FLAT_MAX:
        return "flat", f"fewer than {AUTO_FLAT_MAX:,} vectors: exact search"
    if on_gpu:
        return "ivf-pq", f"at least {AUTO_FLAT_MAX:,} vectors on the GPU, where faiss has no HNSW"
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    needed = hnsw_bytes(count, dim)
    if memory and needed > memory // 2:
        return "ivf-pq", f"HNSW would need {needed / 2**30:.1f} GiB, over half of {memory / 2**30:.1f} GiB"
    return "hnsw", f"at least {AUTO_FLAT_MAX:,} vectors"


def index_params(kind: str, count: int, dim: int) -> dict[str, Any]:
    """The parameters of a new `kind` index, recorded in its metadata."""
    if kind == "flat":
        return {}
    if kind == "hnsw":
        return {"M": HNSW_M, "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH}
    if kind == "ivf-pq":
        if count < IVF_PQ_MIN_DOCS:
            raise InputError(
                f"ivf-pq needs at least {IVF_PQ_MIN_DOCS:,} documents to train its quantizers, "
                f"this corpus has {count:,}: use --kind flat or hnsw"
            )
        nlist = max(1, min(int(4 * math.sqrt(count)), count // 39))
        m = max(d for d in range(1, max(1, dim // PQ_DIMS_PER_BYTE) + 1) if dim % d == 0)
        return {"nlist": nlist, "m": m, "nbits": 8, "nprobe": min(IVF_NPROBE, nlist)}
    raise InputError(f"unknown index kind {kind!r}: use {', '.join(KINDS[1:])}")


def new_faiss_index(kind: str, dim: int, params: dict[str, Any]) -> FaissIndex:
    """An empty CPU index of `kind` for inner product over `dim`-d vectors."""
    faiss = faiss_module()
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(params["M"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params["ef_construction"])
        index.hnsw.efSearch = int(params["ef_search"])
        return index
    if kind == "ivf-pq":
        quantizer = faiss.IndexFlatIP(dim)  # faiss's Python wrapper keeps it alive with the index
        nlist, m, nbits = int(params["nlist"]), int(params["m"]), int(params["nbits"])
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
        index.nprobe = int(params["nprobe"])
        return index
    raise InputError(f"unknown index kind {kind!r}")


def ivf_training_rows(n: int, nlist: int) -> np.ndarray | slice:
    """Which of `n` vectors train an IVF-PQ index: a fixed-seed sample, sorted (all of them if few).

    50 points per list (faiss warns below 39) and at least `IVF_PQ_MIN_DOCS` for PQ's 256 centroids.
    The rows depend on `n` and `nlist` alone, so an index built from part files trains on the same
    vectors as one built from the corpus in one pass.
    """
    size = min(n, max(50 * nlist, IVF_PQ_MIN_DOCS))
    return np.sort(np.random.default_rng(0).choice(n, size, replace=False)) if size < n else slice(None)


def train_ivf(index: FaissIndex, vectors: np.ndarray, chunk_size: int) -> None:
    """Train an IVF-PQ index on a fixed-seed sample of `vectors` (a memory map), then add them all."""
    n = len(vectors)
    index.train(np.ascontiguousarray(vectors[ivf_training_rows(n, index.nlist)]))
    for start in range(0, n, chunk_size):
        index.add(np.ascontiguousarray(vectors[start : start + chunk_size]))
