"""The vectors of an index build: into the appended index as they come, or spooled to disk until
a new index's size, and so its kind, is known (`embedkit.jobs.index_build`); a quantized index's
float vectors kept beside its codes (`embedkit.index.quantized`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.index.kinds import train_ivf
from embedkit.index.quantized import (
    FULL_VECTORS,
    kind_and_params,
    new_index,
    open_full_vectors,
    quantization,
    train_quantized,
    write_full_vectors,
)
from embedkit.index.rows import add_rows

SPOOL = "vectors.tmp.f32"  # a new index's vectors, in the build folder until its kind is chosen


@dataclass(frozen=True)
class Target:
    """What the vectors go into: the appended index's metadata (None: a new index), and for a new
    one the kind and quantization asked for."""

    old: dict[str, Any] | None
    kind: str  # auto, flat, hnsw or ivf-pq
    quantize: str | None  # int8, binary or None
    chunk_size: int  # vectors added to FAISS at a time


class VectorWriter:
    """Vectors into the appended index as they come, or for a new index into `SPOOL` until
    `finish` knows how many there are (the kind and its parameters depend on it)."""

    def __init__(
        self, index: Any, tmp: Path, first_row: int, dim: int, target: Target, placement: Any, *, on_gpu: bool
    ) -> None:
        self.index, self.first_row, self.next_row, self.dim = index, first_row, first_row, dim
        self.target, self.placement, self.on_gpu = target, placement, on_gpu
        old = target.old
        self.kind = old["kind"] if old else ""
        self.added = 0
        self._spool_path = tmp / SPOOL
        # float vectors to keep: all of a new index's, until its kind is chosen; an appended
        # quantized index's new ones, for its `FULL_VECTORS`
        quantized = old is not None and quantization(old["params"]) is not None
        self._spool = self._spool_path.open("wb") if index is None or quantized else None
        self._tmp = tmp

    def write(self, vectors: np.ndarray) -> None:
        if self._spool is not None:
            self._spool.write(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
        if self.index is not None:
            add_rows(self.index, vectors, self.next_row)
        self.next_row += len(vectors)
        self.added += len(vectors)

    def finish(self, documents: int) -> tuple[str, str, dict[str, Any], Any]:
        """(kind, why, params, the CPU index) once every vector is written."""
        dim, placement, target = self.dim, self.placement, self.target
        if self.index is not None:
            if self._spool is not None:  # a quantized index: the new float vectors after its own
                self._spool.close()
                self._keep_full_vectors(dim)
            index = placement.to_cpu(self.index) if self.on_gpu else self.index
            return self.kind, "the index's kind", dict(target.old["params"]), index  # type: ignore[index]
        assert self._spool is not None
        self._spool.close()
        kind, reason, params = self._kind(dim)
        index = new_index(kind, dim, params)
        work = placement.to_gpu(index, kind) if placement else index
        vectors = np.memmap(self._spool_path, dtype=np.float32, mode="r", shape=(self.added, dim))
        chunk = target.chunk_size
        if quantization(params):
            write_full_vectors(self._tmp / FULL_VECTORS, [(vectors, 0)], self.added, dim)
            if not work.is_trained:
                train_quantized(work, vectors)  # int8: each dimension's range
        if not work.is_trained:
            train_ivf(work, vectors, chunk)  # trained on a fixed-seed sample, then every vector added
        else:
            for start in range(0, self.added, chunk):
                add_rows(work, np.ascontiguousarray(vectors[start : start + chunk]), start)
        del vectors
        self._spool_path.unlink()
        return kind, reason, params, placement.to_cpu(work) if placement else work

    def _kind(self, dim: int) -> tuple[str, str, dict[str, Any]]:
        """A new index's kind, why, and its parameters (with its quantization, if asked for)."""
        target = self.target
        return kind_and_params(
            target.kind, target.quantize, self.added, dim, on_gpu=self.placement is not None
        )

    def _keep_full_vectors(self, dim: int) -> None:
        """The appended quantized index's `FULL_VECTORS`: its rows, then the new ones (from the spool)."""
        path = self._tmp / FULL_VECTORS
        before = open_full_vectors(self._tmp, dim, self.first_row)[: self.first_row]
        new = np.memmap(self._spool_path, dtype=np.float32, mode="r", shape=(self.added, dim))
        staged = self._tmp / f"{FULL_VECTORS}.tmp"
        write_full_vectors(staged, [(before, 0), (new, self.first_row)], self.next_row, dim)
        del before, new
        staged.replace(path)
        self._spool_path.unlink()
