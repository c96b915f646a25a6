"""The host path in arrays: tokenized texts as one flat table of ids, batches cut from it by NumPy.

The tokenizer hands back one `Encoding` object a text. Reading a text's ids (`Encoding.ids`, a
list made in Rust) is the one step a row takes in Python; from there everything is whole-array
NumPy: the ids of every text of a chunk join one flat int32 table (`tokens_of`), and a batch is
gathered from it by index (`pad_rows`) with its length computed from the lengths, never walked
token by token. Token type ids are zeros for single texts (the tokenizer's post-processor gives a
lone sequence type 0), so none are read unless a tokenizer says otherwise (`keep_types`), and none
are made where the graph takes none. The integer type is the graph's (int32 where its inputs are
int32; the exported graphs take int64).

Padding is the same whatever the path: real tokens left-aligned, `pad_id` after them, the mask 1
on real tokens; under fixed shapes (`embedkit.encode.shapes`) extra rows attend to one pad token,
so no pooling divides by zero. A batch's vectors therefore do not depend on how it was padded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from embedkit.encode.shapes import ShapePlan


@dataclass
class Batch:
    """One padded batch; `indices` are the rows' positions in the caller's list.

    Under fixed shapes (`embedkit.encode.shapes`) the arrays may hold more rows than `indices`:
    the extra rows are empty and their outputs are dropped (`real_rows`).
    """

    indices: np.ndarray  # (n,)
    input_ids: np.ndarray  # (B, T) int64 or int32 (the graph's), B >= n
    attention_mask: np.ndarray  # (B, T), the same integer type
    token_type_ids: np.ndarray | None  # (B, T), or None where the model takes none
    lengths: np.ndarray | None = None  # (n,) the real rows' tokens
    truncated: int = 0  # real rows cut at the model's max length

    @property
    def real_rows(self) -> int:
        return len(self.indices)


@dataclass
class StageTimes:
    """Seconds summed in each stage of the host path, over every call (threads add with one
    `+=` at a time: the GIL)."""

    tokenize_s: float = 0.0
    pad_s: float = 0.0
    copy_s: float = 0.0  # host to device (CUDA with IO binding); on the CPU the run reads the arrays
    run_s: float = 0.0

    def add(self, stage: str, seconds: float) -> None:
        setattr(self, stage, getattr(self, stage) + seconds)

    def reset(self) -> None:
        self.tokenize_s = self.pad_s = self.copy_s = self.run_s = 0.0


@dataclass(frozen=True)
class Tokens:
    """Token ids of N texts in one flat table: text i is `ids[starts[i] : starts[i] + lengths[i]]`."""

    ids: np.ndarray  # (total,) int32
    starts: np.ndarray  # (N,) int64
    lengths: np.ndarray  # (N,) int64: tokens of each text, special tokens included
    truncated: np.ndarray  # (N,) bool: cut at the tokenizer's max length
    type_ids: np.ndarray | None = None  # (total,) int8, only where a tokenizer gives non-zero types

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        """Text i's ids (a view)."""
        start = int(self.starts[i])
        return self.ids[start : start + int(self.lengths[i])]

    @classmethod
    def from_rows(cls, rows: Sequence[np.ndarray], truncated: Sequence[bool] | None = None) -> Tokens:
        """A table of the texts whose ids are `rows` (such as rows of several tables)."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.concatenate(rows).astype(np.int32, copy=False) if len(rows) else np.zeros(0, np.int32)
        cut = np.zeros(len(rows), bool) if truncated is None else np.asarray(truncated, dtype=bool)
        return cls(ids, np.cumsum(lengths) - lengths, lengths, cut)


def tokens_of(encodings: Sequence[Any], keep_types: bool = False) -> Tokens:
    """The flat table of a tokenizer's `encodings`: each row's ids read once, joined by NumPy."""
    id_lists = [e.ids for e in encodings]
    lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=total)
    truncated = np.fromiter((bool(e.overflowing) for e in encodings), dtype=bool, count=len(encodings))
    types = None
    if keep_types:
        types = np.fromiter(chain.from_iterable(e.type_ids for e in encodings), dtype=np.int8, count=total)
    return Tokens(ids, np.cumsum(lengths) - lengths, lengths, truncated, types)


def pad_rows(
    tokens: Tokens,
    rows: np.ndarray,
    pad_id: int,
    width: int | None = None,
    *,
    shapes: ShapePlan | None = None,
    max_rows: int | None = None,
    dtype: Any = np.int64,
    type_ids: bool = True,
) -> Batch:
    """The texts `rows` of `tokens`, padded to the longest of them (or to `width`), (B, T).

    With `shapes`, the length and the row count are padded up to the plan's buckets (rows within
    `max_rows`); extra rows attend to one pad token. `type_ids=False`: no type ids (the graph
    takes none). The batch's `indices` are `rows`; callers map them to their own positions.
    """
    rows = np.asarray(rows, dtype=np.int64)
    lengths = tokens.lengths[rows]
    count = len(rows)
    width = width or int(lengths.max(initial=1))
    height = count
    if shapes is not None:
        width = shapes.length(width)
        height = shapes.rows(count, max(max_rows or count, count))
    positions = np.arange(width)
    real = positions < lengths[:, None]  # (n, T): each row's tokens, left-aligned
    where = np.minimum(tokens.starts[rows, None] + positions, max(len(tokens.ids) - 1, 0))  # (n, T)
    ids = np.full((height, width), pad_id, dtype=dtype)
    mask = np.zeros((height, width), dtype=dtype)
    if len(tokens.ids):
        ids[:count] = np.where(real, tokens.ids[where], pad_id)
    mask[:count] = real
    mask[count:, 0] = 1
    types = None
    if type_ids:
        types = np.zeros((height, width), dtype=dtype)
        if tokens.type_ids is not None and len(tokens.ids):
            types[:count] = np.where(real, tokens.type_ids[where], 0)
    return Batch(rows, ids, mask, types, lengths, int(tokens.truncated[rows].sum()))


__all__ = ["Batch", "StageTimes", "Tokens", "pad_rows", "tokens_of"]
