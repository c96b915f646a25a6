"""Quantized vectors with rescoring (`index --quantize int8|binary`).

A quantized index keeps two forms of each vector. FAISS holds a compact code that the first pass
searches: `int8`, faiss's scalar quantizer (`IndexScalarQuantizer`, `IndexHNSWSQ`; one byte per
dimension, 4x less than float32) or `binary`, the sign of each dimension (`IndexBinaryFlat`,
`IndexBinaryHNSW`; one bit, 32x less, compared by Hamming distance). The float32 vectors lie in
`FULL_VECTORS`, a `.npy` file of the version folder indexed by row and memory-mapped, never read
into memory as a whole: the first pass's best `RESCORE[quantize] x k` candidates (at most
`RESCORE_MAX`) are rescored with them (exact cosines), so the scores a search returns are float
cosines and its ranking that of exact search among the candidates. This is the scheme of sentence-
transformers' `quantize_embeddings` guide (binary first pass, rescoring) and of Qdrant's `rescore`.

Rows are permanent keys (`embedkit.index.rows`): `FULL_VECTORS[row]` is the vector of `row`,
deleted rows included (their codes are masked in FAISS, as in HNSW, until `compact`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import InputError
from embedkit.index.kinds import FaissIndex, choose_kind, faiss_module, index_params, new_faiss_index

QUANTIZE = ("int8", "binary")
FULL_VECTORS = "vectors.npy"  # float32 [rows, dim], row-indexed, in each version folder
# Candidates rescored per hit asked for. sentence-transformers' guide rescores 4x for int8 (recall@10
# 1.000 against exact search at 1M documents, benchmarks/scale.py). A binary first pass ranks more
# coarsely (384 bits of signs): at 1M documents (200 queries, dense, 2 cores) 10x kept 0.760 of the
# exact top 10 at 10.2 ms p50, 20x 0.847, 40x 0.918 at 10.9 ms, 80x 0.958 at 14.7 ms.
RESCORE = {"int8": 4, "binary": 40}
# At most this many candidates a query, whatever k: hybrid search asks each side for 100 hits
# (`FUSION_DEPTH`), and 40 x 100 = 4,000 candidates took the 1M binary HNSW index's hybrid p50 from
# 17.5 ms (1,000 candidates) to 56 ms; 1,000 is what 10 x 100 gave before, for the fused list's tail.
RESCORE_MAX = 1000
QUANTIZE_ON_CPU = "--quantize builds on the CPU: use --device auto or cpu"


def rescore_candidates(k: int, rescore: int, rows: int) -> int:
    """How many first-pass candidates a search of `k` hits rescores: `rescore` x k, at most
    `RESCORE_MAX` (never fewer than k), at most the index's `rows`."""
    return min(rows, max(k, min(k * rescore, RESCORE_MAX)))


TRAIN_SAMPLE = 100_000  # vectors an int8 quantizer learns each dimension's range from


def quantization(params: dict[str, Any]) -> str | None:
    """The index's quantization (`QUANTIZE`), or None for float vectors."""
    return params.get("quantize")


def check_quantize(quantize: str | None, kind: str, dim: int) -> None:
    """An `InputError` where `quantize` cannot apply to a `kind` index of `dim`-d vectors."""
    if quantize is None:
        return
    if quantize not in QUANTIZE:
        raise InputError(f"unknown --quantize {quantize!r}: use {' or '.join(QUANTIZE)}")
    if kind not in ("flat", "hnsw"):
        raise InputError(f"--quantize {quantize} builds a flat or hnsw index, not {kind}: drop --kind {kind}")
    if quantize == "binary" and dim % 8:
        raise InputError(
            f"--quantize binary packs 8 dimensions a byte: {dim}-d vectors are not a multiple of 8"
        )


def new_quantized_index(kind: str, dim: int, params: dict[str, Any]) -> FaissIndex:
    """An empty quantized index of `kind` (flat or hnsw); int8 wants `train_quantized` before adding."""
    faiss = faiss_module()
    if params["quantize"] == "binary":
        if kind == "flat":
            return faiss.IndexBinaryFlat(dim)
        index = faiss.IndexBinaryHNSW(dim, int(params["M"]))
    else:
        int8 = faiss.ScalarQuantizer.QT_8bit
        if kind == "flat":
            return faiss.IndexScalarQuantizer(dim, int8, faiss.METRIC_INNER_PRODUCT)
        index = faiss.IndexHNSWSQ(dim, int8, int(params["M"]), faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = int(params["ef_construction"])
    index.hnsw.efSearch = int(params["ef_search"])
    return index


def is_binary(index: FaissIndex) -> bool:
    return isinstance(index, faiss_module().IndexBinary)


def is_quantized(index: FaissIndex) -> bool:
    """Whether `index` holds codes rather than the vectors (its removals mask, `embedkit.index.rows`)."""
    faiss = faiss_module()
    inner = index.index if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)) else index
    return is_binary(inner) or isinstance(inner, (faiss.IndexScalarQuantizer, faiss.IndexHNSWSQ))


def codes(vectors: np.ndarray) -> np.ndarray:
    """The binary codes of float vectors: one bit a dimension, set where it is positive, packed."""
    return np.packbits(np.asarray(vectors) > 0, axis=1)


def first_pass_queries(index: FaissIndex, queries: np.ndarray) -> np.ndarray:
    """What `index` is searched with: the queries, or for a binary index their codes."""
    return codes(queries) if is_binary(index) else queries


def write_full_vectors(path: Path, parts: list[tuple[np.ndarray, int]], rows: int, dim: int) -> None:
    """`FULL_VECTORS` at `path`: [rows, dim] float32 filled from (array, first row) parts, in chunks."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
    chunk = 65_536
    for array, first in parts:
        for start in range(0, len(array), chunk):
            block = np.asarray(array[start : start + chunk], dtype=np.float32)
            out[first + start : first + start + len(block)] = block
    out.flush()
    del out


def open_full_vectors(folder: Path, dim: int, rows: int) -> np.ndarray:
    """The memory-mapped `FULL_VECTORS` of a version folder, checked: an `InputError` if it is
    missing, not a float32 .npy of `dim` columns, or shorter than the `rows` it must hold."""
    path = folder / FULL_VECTORS
    if not path.is_file():
        raise InputError(f"{path} is missing: a quantized index rescores with it; rebuild the index")
    try:
        full: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError(f"{path} is not a readable .npy file ({exc}): rebuild the index") from None
    if full.dtype != np.float32 or full.ndim != 2 or full.shape[1] != dim or len(full) < rows:
        raise InputError(
            f"{path} holds {full.dtype} {full.shape}; the index needs float32 rows of {dim} for "
            f"{rows:,} rows: rebuild the index"
        )
    return full


def rescored(
    queries: np.ndarray, rows: np.ndarray, full: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` of each query's candidate `rows` (-1: none) by exact cosine against `full`,
    best first: (scores, rows) [q, k], padded with row -1 and score -inf."""
    from embedkit.search.exact import top_k

    out_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    out_rows = np.full((len(queries), k), -1, dtype=np.int64)
    for q, candidates in enumerate(rows):
        found = np.unique(candidates[candidates >= 0])  # sorted: the memory map is read in order
        if not len(found):
            continue
        scores = np.asarray(full[found], dtype=np.float32) @ queries[q]
        best_scores, best_rows = top_k(scores[None, :], found[None, :], k)
        out_scores[q, : best_rows.shape[1]], out_rows[q, : best_rows.shape[1]] = best_scores[0], best_rows[0]
    return out_scores, out_rows


def new_index(kind: str, dim: int, params: dict[str, Any]) -> FaissIndex:
    """An empty index of `kind` as `params` describe it: quantized where they say so."""
    return (
        new_quantized_index(kind, dim, params) if quantization(params) else new_faiss_index(kind, dim, params)
    )


def int8_training_rows(n: int) -> np.ndarray:
    """Which of `n` vectors an int8 quantizer learns its ranges from: a fixed-seed sample, sorted,
    that depends on `n` alone (so an index built from part files trains on the same rows)."""
    return np.sort(np.random.default_rng(0).choice(n, min(n, TRAIN_SAMPLE), replace=False))


def train_quantized(index: FaissIndex, vectors: np.ndarray) -> None:
    """Train an int8 quantizer (each dimension's range) on a fixed-seed sample of `vectors`."""
    sample = int8_training_rows(len(vectors))
    index.train(np.ascontiguousarray(vectors[sample], dtype=np.float32))


def kind_and_params(
    kind: str, quantize: str | None, count: int, dim: int, *, on_gpu: bool
) -> tuple[str, str, dict[str, Any]]:
    """A new index's kind, why, and its parameters, with its quantization where asked for: for
    quantized codes `auto`'s IVF-PQ (chosen for lack of memory) becomes HNSW, whose codes fit."""
    if quantize is not None and on_gpu:
        raise InputError(QUANTIZE_ON_CPU)
    chosen, reason = choose_kind(kind, count, dim, on_gpu=on_gpu)
    if quantize is not None and chosen == "ivf-pq" and kind == "auto":
        chosen, reason = "hnsw", f"{reason}; quantized {quantize} codes fit in memory: HNSW"
    check_quantize(quantize, chosen, dim)
    params = index_params(chosen, count, dim)
    if quantize is not None:
        params |= {"quantize": quantize, "rescore": RESCORE[quantize]}
    return chosen, reason, params
