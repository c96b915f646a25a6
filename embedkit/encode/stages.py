"""The one encoder backend: three stages every path to a vector goes through.

- *prepare*: texts to padded integer arrays of one shape (`tokenize` to a flat table of ids with
  lengths and truncation flags, `pad` to one batch of one bucket; `prepare` does both for a whole
  list, length-sorted, with tokenizer workers ahead of the model);
- *run*: one batch's arrays to pooled vectors on the device (the encoder's graph or model);
- *finish*: vectors back in the caller's order, L2-normalized where asked, cut to `dimensions`.

`encode` (and so `embedkit encode`, `index`, the Python API and evaluation), the server (its
batches and `/search`'s queries) and training's token tables call these stages and nothing below
them, as infinity's backends expose `encode_pre` / `encode_core` / `encode_post`: a change to the
host path or the device path is made once. The stages keep their seconds in `times` (the host
split `make gpu-check` reports).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embedkit.encode.batching import TokenBatcher, l2_normalize
from embedkit.encode.shapes import ShapePlan
from embedkit.encode.token_arrays import Batch, StageTimes, Tokens
from embedkit.progress import ProgressBar


@dataclass
class Tally:
    """What the `encode` calls made inside `counting()` embedded, one entry a call, in order."""

    calls: list[tuple[int, int, int]] = field(default_factory=list)  # (texts, tokens, truncated)

    @property
    def tokens(self) -> int:
        """The first call's tokens (a search's queries; a later call embeds feedback documents)."""
        return self.calls[0][1] if self.calls else 0

    @property
    def truncated(self) -> int:
        return self.calls[0][2] if self.calls else 0


_tally: ContextVar[Tally | None] = ContextVar("embedkit_tally", default=None)


@contextmanager
def counting() -> Iterator[Tally]:
    """Count what `encode` embeds in this thread meanwhile, from the batches it runs: a caller
    that needs the token counts of texts it hands to a library function (the server's `/search`)
    need not tokenize them a second time."""
    tally = Tally()
    token = _tally.set(tally)
    try:
        yield tally
    finally:
        _tally.reset(token)


class EncoderStages:
    """One encoder's prepare, run and finish.

    `batcher` tokenizes and pads; `run(batch)` gives float32 (B, dim) for a padded batch (its real
    rows first); `shapes` is the encoder's shape rule (fixed buckets on CUDA); `dtype` and
    `type_ids` are what the graph takes; `workers` tokenizer threads prepare ahead in `encode`.
    """

    def __init__(
        self,
        batcher: TokenBatcher,
        run: Callable[[Batch], np.ndarray],
        dim: int,
        *,
        shapes: ShapePlan | None = None,
        dtype: Any = np.int64,
        type_ids: bool = True,
        workers: int = 0,
        warm: Callable[[int, int | None], Any] | None = None,
    ) -> None:
        self.batcher = batcher
        self._warm = warm
        self._run = run
        self.dim = dim
        self.shapes = shapes
        self.dtype = np.dtype(dtype)
        self.type_ids = type_ids
        self.workers = workers

    @property
    def times(self) -> StageTimes:
        return self.batcher.times

    @property
    def max_seq_length(self) -> int:
        return self.batcher.max_seq_length

    @property
    def truncated(self) -> int:
        return self.batcher.truncated

    @property
    def fixed_shapes(self) -> ShapePlan | None:
        return self.shapes if self.shapes is not None and self.shapes.fixed else None

    # --- prepare -----------------------------------------------------------------------------

    def tokenize(self, texts: Sequence[str]) -> Tokens:
        """The texts' token ids (truncated at the model's length), their lengths and truncation."""
        return self.batcher.tokenize(texts)

    def pad(self, tokens: Tokens, rows: np.ndarray, max_rows: int | None = None) -> Batch:
        """One batch of the texts `rows` of `tokens`, padded to the encoder's shape rule (a fixed
        bucket of at most `max_rows` rows, or the longest text); `indices` are `rows`."""
        shapes = self.fixed_shapes
        return self.batcher.pad(
            tokens, rows, shapes=shapes, max_rows=max_rows, dtype=self.dtype, type_ids=self.type_ids
        )

    def prepare(self, texts: Sequence[str], batch_size: int, workers: int | None = None) -> Iterator[Batch]:
        """Length-sorted batches of `texts` (`TokenBatcher.batches`), `workers` threads ahead."""
        return self.batcher.batches(
            texts,
            batch_size,
            self.fixed_shapes,
            workers=self.workers if workers is None else workers,
            dtype=self.dtype,
            type_ids=self.type_ids,
        )

    # --- run ---------------------------------------------------------------------------------

    def run(self, batch: Batch) -> np.ndarray:
        """float32 (n, dim): the pooled vectors of the batch's real rows, as the model computes them."""
        start = time.perf_counter()
        vectors = self._run(batch)[: batch.real_rows]
        self.times.add("run_s", time.perf_counter() - start)
        return vectors

    def warm_up(self, rows: int, max_tokens: int | None = None) -> Any:
        """Run every fixed shape of batches up to `rows` rows (and `max_tokens` padded tokens) once
        (the encoder's warm-up record), or None where the encoder has no fixed shapes."""
        if self._warm is None or self.fixed_shapes is None:
            return None
        return self._warm(rows, max_tokens)

    # --- finish ------------------------------------------------------------------------------

    def finish(
        self,
        parts: Iterable[tuple[np.ndarray, np.ndarray]],
        count: int,
        normalize: bool = False,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """float32 [count, dim] from (positions, vectors) pairs, each row at its position;
        L2-normalized with `normalize`, cut to `dimensions` (renormalized) when given."""
        out = np.empty((count, self.dim), dtype=np.float32)
        for positions, vectors in parts:
            out[positions] = vectors
        if normalize:
            out = l2_normalize(out).astype(np.float32, copy=False)
        if dimensions is not None and dimensions != self.dim:
            from embedkit.encode.dimensions import truncate_vectors

            out = truncate_vectors(out, dimensions)
        return out

    # --- all three ---------------------------------------------------------------------------

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int,
        *,
        normalize: bool = False,
        dimensions: int | None = None,
        progress: bool = False,
        description: str = "embedding",
        run: Callable[[Batch], np.ndarray] | None = None,
        workers: int | None = None,
    ) -> np.ndarray:
        """float32 [n, dim] in the texts' order: prepare, run (`run` instead of the model's, as
        torch's per-call normalization needs), finish."""
        run = run or self.run
        tally = _tally.get()
        counts = [0, 0]  # tokens, truncated texts
        bar = ProgressBar(len(texts), description, enabled=progress, rate_unit="sent/s", transient=True)
        with bar:

            def ran() -> Iterator[tuple[np.ndarray, np.ndarray]]:
                for batch in self.prepare(texts, batch_size, workers) if len(texts) else ():
                    yield batch.indices, run(batch)[: batch.real_rows]
                    counts[0] += int(batch.lengths.sum()) if batch.lengths is not None else 0
                    counts[1] += batch.truncated
                    bar.advance(batch.real_rows)

            out = self.finish(ran(), len(texts), normalize, dimensions)
        if tally is not None:
            tally.calls.append((len(texts), counts[0], counts[1]))
        return out


__all__ = ["EncoderStages", "Tally", "counting"]
