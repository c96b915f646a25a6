"""What an embedding run did and how fast: the fields every embed report shares.

`EmbedRun` is the common part of the reports of `embed_to_file`, `embed_shard` and `embed_with_ray`
(documents, dimension, truncations, wall time, device, throughput); `EncoderRun` adds the backend
and is measured from the encoder itself: `RunStart.of(encoder)` before the run, `measured` after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder

R = TypeVar("R", bound="EncoderRun")


@dataclass(frozen=True)
class EmbedRun:
    """Documents embedded, their dimension, how many were truncated, the time taken and where."""

    count: int
    dim: int
    truncated: int  # documents cut at the model's max_seq_length
    seconds: float
    device: str

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class RunStart:
    """An encoder's truncation count and the clock when a run began; `EncoderRun.measured` ends it."""

    truncated: int
    time: float

    @classmethod
    def of(cls, encoder: Encoder) -> RunStart:
        return cls(truncated=encoder.truncated, time=time.perf_counter())


@dataclass(frozen=True)
class EncoderRun(EmbedRun):
    """An `EmbedRun` of one encoder in this process, with its backend (onnx or torch)."""

    backend: str

    @classmethod
    def measured(cls: type[R], encoder: Encoder, began: RunStart, /, *, count: int, **fields: Any) -> R:
        """The report of `encoder`'s run since `began`: `count` documents, plus the subclass's `fields`."""
        return cls(
            count=count,
            dim=encoder.dim,
            truncated=encoder.truncated - began.truncated,
            seconds=time.perf_counter() - began.time,
            device=str(encoder.device),
            backend=encoder.backend,
            **fields,
        )
