"""The host path on the CPU, before and after it moved to arrays and overlapped stages: one run.

    python benchmarks/host_path.py --data ../shared/data --json host-path.json

Texts: the 28,481 texts of benchmarks/gpu.py (`corpus_texts`). Tokenizer and model: the bundled
all-MiniLM-L6-v2 (its ONNX export, made on first use). Three measurements, each interleaved
(before, after, before, after, ...) and reported as medians, so that a shared machine's load
falls on both sides alike:

- `overlap`: the host path alone against its slowest stage. A stand-in model of fixed cost (a
  sleep per batch, which holds no core, as a GPU would not) runs the batches of `encode` on
  CUDA's host path (fixed shapes, `--batch-size` 1,024 as gpu.py) while the tokenizer workers
  (`--workers`, 1 on 2 cores as on CUDA) prepare the next; its cost is the H200 graph's per batch,
  and again one matched to the host stage (the two stages equal: the hardest case for an
  overlap; that model alone is timed over the prepared batches, its sleeps' wake-ups included).
  Reported: each pass's wall time over the slower of its two stages alone (goal <= 1.15);
- `tokenize_pad`: tokenizing and padding all the texts into batches of `--batch-size`, the
  Python padding of before (tests/encode/test_host_arrays.py keeps it as the reference) against
  the arrays of now (goal: >= 2x the rate);
- `encode`: `encode` on the CPU (batch 64, the default, fp32) over `--encode-texts` of the texts,
  before (its batches through the session with int64 NumPy feeds, as before) and now (not slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "encode"))


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def interleaved(variants: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each variant, the variants run in turn `repeats` times."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            times[name].append(seconds(run))
    return {name: statistics.median(values) for name, values in times.items()}


# The fp16 graph's seconds for the 28,481 texts at batch 1,024 on an H200 (benchmarks/README.md,
# "The GPU half": 0.240 s a pass, 28 batches): a stand-in for the device the host path feeds.
H200_GRAPH_S_PER_BATCH = 0.240 / 28


def measure_overlap(batcher, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Each overlapped pass over the slower of its two stages alone: the stand-in model at the
    H200's cost per batch, and at a cost matched to the host's (the two stages equal)."""
    from embedkit.encode.shapes import ShapePlan
    from embedkit.encode.stages import EncoderStages

    shapes = ShapePlan(batcher.max_seq_length)  # CUDA's host path: fixed shapes, its chunks
    host = EncoderStages(batcher, lambda batch: None, 384, shapes=shapes, workers=args.workers)
    batches = len(list(host.prepare(texts, args.batch_size)))  # and the tokenizer's threads started
    matched = seconds(lambda: list(host.prepare(texts, args.batch_size))) / batches
    zeros = np.zeros((args.batch_size, 384), dtype=np.float32)

    def stand_in(cost: float) -> EncoderStages:
        def run(batch) -> np.ndarray:
            time.sleep(cost)  # the device, busy; no core held
            return zeros[: batch.real_rows]

        return EncoderStages(batcher, run, 384, shapes=shapes, workers=args.workers)

    h200, equal = stand_in(H200_GRAPH_S_PER_BATCH), stand_in(matched)
    prepared = list(host.prepare(texts, args.batch_size))
    medians = interleaved(
        {
            "host_alone": lambda: list(host.prepare(texts, args.batch_size)),
            "model_alone_matched": lambda: [equal.run(batch) for batch in prepared],
            "overlapped_h200": lambda: h200.encode(texts, args.batch_size),
            "overlapped_matched": lambda: equal.encode(texts, args.batch_size),
        },
        args.repeats,
    )
    # the H200's stand-in alone: its sleeps (0.24 s a pass), too short beside the host to matter
    out = {**medians, "batches": batches, "model_alone_h200": batches * H200_GRAPH_S_PER_BATCH}
    for name in ("h200", "matched"):
        slowest = max(medians["host_alone"], out[f"model_alone_{name}"])
        out[f"over_slowest_{name}"] = medians[f"overlapped_{name}"] / slowest
    return out


def measure_tokenize_pad(batcher, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    from test_host_arrays import reference_batches

    tokenizer, pad_id = batcher.tokenizer, batcher.pad_id
    medians = interleaved(
        {
            "before": lambda: list(reference_batches(tokenizer, pad_id, texts, args.batch_size)),
            "after": lambda: list(batcher.batches(texts, args.batch_size, workers=0)),
        },
        args.repeats,
    )
    return {**medians, "speedup": medians["before"] / medians["after"]}


def measure_encode(texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    from test_host_arrays import reference_batches

    from embedkit import load_encoder
    from embedkit.encode.onnx_backend import OUTPUT_NAME

    encoder = load_encoder(None, device="cpu", precision="fp32", tokenizer_workers=0)
    names = {i.name for i in encoder.session.get_inputs()}
    tokenizer, pad_id = encoder.batcher.tokenizer, encoder.batcher.pad_id

    def before() -> np.ndarray:
        out = np.empty((len(texts), encoder.dim), dtype=np.float32)
        for indices, ids, mask, types in reference_batches(tokenizer, pad_id, texts, 64):
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feeds = {k: v for k, v in feeds.items() if k in names}
            out[indices] = encoder.session.run([OUTPUT_NAME], feeds)[0]
        return out

    if not np.array_equal(before(), encoder.encode(texts, batch_size=64)):
        raise SystemExit("the vectors of before and now differ")
    after = lambda: encoder.encode(texts, batch_size=64)  # noqa: E731
    medians = interleaved({"before": before, "after": after}, args.repeats)
    return {**{f"{k}_per_s": len(texts) / v for k, v in medians.items()}, "texts": len(texts)}


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--data", type=Path, help="the shared data folder (default: gpu.py's)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=1, help="tokenizer workers of the overlapped pass")
    parser.add_argument("--encode-texts", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import gpu  # benchmarks/gpu.py, beside this file: its texts

    from embedkit.encode.batching import TokenBatcher
    from embedkit.encode.model_folder import default_base_model_path

    if args.data is not None:
        gpu.DATA = args.data
    texts = gpu.corpus_texts()
    batcher = TokenBatcher(default_base_model_path(), 256)
    started = time.perf_counter()
    report = {"texts": len(texts), "batch_size": args.batch_size, "workers": args.workers}
    report["tokenize_pad"] = measure_tokenize_pad(batcher, texts, args)
    print(f"tokenize + pad: {json.dumps(report['tokenize_pad'])}", flush=True)
    report["overlap"] = measure_overlap(batcher, texts, args)
    print(f"overlap: {json.dumps(report['overlap'])}", flush=True)
    sample = gpu.corpus_texts(args.encode_texts)
    report["encode"] = measure_encode(sample, args)
    print(f"encode: {json.dumps(report['encode'])}", flush=True)
    report["seconds"] = time.perf_counter() - started
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
