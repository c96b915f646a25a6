"""One `encode` pass split into its stages: where the host's time goes beside the model's.

Used by benchmarks/gpu.py: the wall time of a pass beside the seconds its encoder's stages
(`embedkit.encode.stages`) summed in it: tokenizing and padding (on the tokenizer workers, ahead
of the model), copying the batches to the device (IO binding on CUDA; nothing on the CPU, where the
session reads the arrays in place) and running them (the copy included). Where the parts sum to
the wall time nothing overlapped; where one part is near it, that part bounds the pass.
"""

from __future__ import annotations

import time

PARTS = ("tokenize_s", "pad_s", "copy_s", "run_s")


def timed_pass(encoder, texts: list[str], batch_size: int) -> dict[str, float]:
    """The wall time of one `encode` pass of `encoder` (an ONNX or torch encoder) and its stages'."""
    times = encoder.stages.times
    times.reset()
    start = time.perf_counter()
    encoder.encode(texts, batch_size=batch_size)
    wall = time.perf_counter() - start
    return {"wall_s": wall, **{part: getattr(times, part) for part in PARTS}}


def describe(split: dict[str, float]) -> str:
    """`timed_pass`'s figures in one line."""
    return (
        f"{split['wall_s']:.3f} s: tokenize {split['tokenize_s']:.3f} s + pad {split['pad_s']:.3f} s "
        f"(tokenizer workers), copy {split['copy_s']:.3f} s, run {split['run_s']:.3f} s (copy included)"
    )
