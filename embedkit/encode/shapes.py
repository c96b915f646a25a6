"""Fixed shapes: the one rule for the (rows, length) of every batch an ONNX session runs.

ONNX Runtime's CUDA provider pays a large cost the first time it meets an input shape: on an H200
a first `encode` pass over fresh texts ran 3 to 6 times slower than a later pass over the same
shapes, and a server met a new (batch, length) in almost every batch. With fixed shapes a batch
is padded up to the next bucket: its length to a multiple of 16 up to 128 tokens, then of 32 up to
the model's maximum (`LENGTH_STEPS`), and its rows to the next value of a short ladder (1, 2, 3,
4, 6, 8, 12, 16, ...: powers of two and one and a half times them, `row_buckets`), capped at the
batch size asked for. Padded rows are empty (one attended pad token) and their outputs dropped; a
padded position is masked out of attention and pooling, so no real text's vector changes
(tests/encode/test_shapes.py checks it on every pooling mode). The set of shapes a session can
meet is then small enough to run once at load (`warmup`), which is on by default on CUDA.

On the CPU a shape costs nothing to meet, while padding is computed like any token: the rule is
off there by default (`fixed_shapes_default`), and batches keep their exact shapes.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache

# (up to this length, step): multiples of 16 up to 128 tokens (most sentences; at most 15 pad
# tokens a row), then of 32 up to the model's maximum (few texts; fewer shapes).
LENGTH_STEPS: tuple[tuple[int, int], ...] = ((128, 16), (1 << 30, 32))
# The largest batch the load-time warm-up runs by default: the commands' default --batch-size.
WARMUP_ROWS = 64


@lru_cache(maxsize=64)
def length_buckets(max_length: int) -> tuple[int, ...]:
    """Every padded length up to `max_length` (which is always the last one)."""
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    out: list[int] = []
    n = 0
    while n < max_length:
        step = next(step for limit, step in LENGTH_STEPS if n < limit)
        n = min(n + step, max_length)
        out.append(n)
    return tuple(out)


@lru_cache(maxsize=64)
def row_buckets(limit: int) -> tuple[int, ...]:
    """Every padded row count up to `limit` (which is always the last one): 1, 2, 3, 4, 6, 8, ...

    Two steps an octave keep the padded rows under 1.5x the real ones in the worst case.
    """
    if limit < 1:
        raise ValueError(f"the row limit must be at least 1, got {limit}")
    ladder = {1}
    power = 2
    while power < limit:
        ladder.update((power, power * 3 // 2))
        power *= 2
    return tuple(sorted(n for n in ladder if n < limit)) + (limit,)


def bucket(value: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds `value`."""
    i = bisect_left(buckets, value)
    if i == len(buckets):
        raise ValueError(f"{value} is over the largest bucket {buckets[-1]}")
    return buckets[i]


def fixed_shapes_default(device: str) -> bool:
    """Fixed shapes (and the warm-up) by default where a new shape is costly: CUDA, not the CPU."""
    return device.startswith("cuda")


@dataclass(frozen=True)
class ShapePlan:
    """The shape rule of one model: `fixed` pads to buckets; otherwise batches keep their own shape."""

    max_length: int  # the model's max_seq_length: the longest bucket
    fixed: bool = True

    def length(self, longest: int) -> int:
        """The padded length of a batch whose longest text has `longest` tokens."""
        return bucket(longest, length_buckets(self.max_length)) if self.fixed else longest

    def rows(self, count: int, limit: int) -> int:
        """The padded row count of `count` texts in a batch of at most `limit` rows."""
        if count > limit:
            raise ValueError(f"{count} rows in a batch of at most {limit}")
        return bucket(count, row_buckets(limit)) if self.fixed else count

    def shapes(self, limit: int, max_tokens: int | None = None) -> list[tuple[int, int]]:
        """Every (rows, length) a batch of at most `limit` rows can take, largest first; with
        `max_tokens`, only those of at most that many padded tokens (or a single row)."""
        if not self.fixed:
            return []
        out = [
            (rows, length)
            for rows in row_buckets(limit)
            for length in length_buckets(self.max_length)
            if max_tokens is None or rows == 1 or rows * length <= max_tokens
        ]
        return sorted(out, key=lambda shape: (shape[0] * shape[1], shape), reverse=True)

    def describe(self, limit: int) -> dict[str, object]:
        """The rule as `/info` reports it, for batches of at most `limit` rows (None: exact shapes)."""
        return {
            "fixed": self.fixed,
            "lengths": list(length_buckets(self.max_length)) if self.fixed else None,
            "rows": list(row_buckets(limit)) if self.fixed else None,
        }
