"""One `encode` pass split into its parts: where the host's time goes beside the model's.

Used by benchmarks/gpu.py (its `encode_split`): the wall time of one pass over texts whose shapes
the encoder has seen, beside the seconds summed inside the tokenizer (`TokenBatcher._encode`), the
padding (`pad_encodings`), both on the worker thread that prepares batches ahead, and the model
(`run_batch`, on the calling thread). Where the parts sum to the wall time nothing overlapped; where
one part is near it, that part bounds the pass.
"""

from __future__ import annotations

import time


def encode_split(encoder, texts: list[str], batch_size: int) -> dict[str, float]:
    """The wall time of one `encode` pass of `encoder` (an ONNX encoder) and its parts' seconds."""
    from embedkit.encode import batching

    spent = {"tokenize_s": 0.0, "pad_s": 0.0, "graph_s": 0.0}

    def timed(function, key):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start  # one += at a time: the GIL

        return wrapper

    batcher = encoder.batcher
    originals = (batcher._encode, batching.pad_encodings, encoder.run_batch)
    batcher._encode = timed(batcher._encode, "tokenize_s")
    batching.pad_encodings = timed(batching.pad_encodings, "pad_s")
    encoder.run_batch = timed(encoder.run_batch, "graph_s")
    try:
        start = time.perf_counter()
        encoder.encode(texts, batch_size=batch_size)
        wall = time.perf_counter() - start
    finally:
        batcher._encode, batching.pad_encodings = originals[0], originals[1]
        del encoder.run_batch  # the instance's wrapper: the class's method again
    return {"wall_s": wall, **spent}


def describe(split: dict[str, float]) -> str:
    """`encode_split`'s figures in one line."""
    worker = f"tokenizer {split['tokenize_s']:.3f} s and padding {split['pad_s']:.3f} s (worker thread)"
    return f"{split['wall_s']:.3f} s: {worker}, model {split['graph_s']:.3f} s (caller)"
