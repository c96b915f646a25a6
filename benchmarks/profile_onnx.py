"""Where ONNX Runtime spends its time: operator-type shares of each precision of an export.

    .venv/bin/python benchmarks/profile_onnx.py --onnx DIR [--sentences 640] [--threads 2]

Runs the benchmark sentences of `encode.py` (length-sorted, batch 64) through each precision of
an `embedkit export --fp16 --int8` folder on the CPU with ONNX Runtime's profiler on, then prints
each operator type's share of the summed kernel time and the wall time of the profiled pass. The
profiler adds overhead: use the shares to see what dominates, and encode.py for speed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from encode import BATCH_SIZE, benchmark_texts  # noqa: E402


def profile(onnx_dir: Path, precision: str, texts: list[str], threads: int | None, work: Path) -> tuple:
    import onnxruntime as ort

    from embedkit.encode.onnx_backend import OnnxEncoder, session_options

    encoder = OnnxEncoder(onnx_dir, device="cpu", precision=precision, intra_op_threads=threads)
    encoder.encode(texts[:BATCH_SIZE])  # warm-up, unprofiled
    options = session_options(threads)
    options.enable_profiling = True
    options.profile_file_prefix = str(work / precision)
    file = onnx_dir / encoder.metadata["files"][precision]
    encoder.session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
    start = time.perf_counter()
    encoder.encode(texts, batch_size=BATCH_SIZE)
    seconds = time.perf_counter() - start
    trace = json.loads(Path(encoder.session.end_profiling()).read_text())
    by_op: dict[str, float] = defaultdict(float)
    for event in trace:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    return seconds, by_op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, required=True, help="An `embedkit export --fp16 --int8` folder.")
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precisions", default="fp32,int8")
    args = parser.parse_args()
    texts = benchmark_texts(args.sentences)
    with tempfile.TemporaryDirectory(prefix="embedkit-profile-") as work:
        for precision in args.precisions.split(","):
            seconds, by_op = profile(args.onnx, precision, texts, args.threads, Path(work))
            total = sum(by_op.values())
            rate = len(texts) / seconds
            print(f"{precision}: {rate:.1f} sent/s (profiled), kernel time {total / 1e6:.2f} s")
            for op, dur in sorted(by_op.items(), key=lambda item: -item[1]):
                if dur / total >= 0.01:
                    print(f"  {op:<32} {100 * dur / total:5.1f}%")


if __name__ == "__main__":
    main()
