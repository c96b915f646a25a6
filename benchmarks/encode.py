"""Encoding speed and STS-B quality: sentence-transformers vs embedkit's torch and ONNX paths.

    .venv/bin/python benchmarks/encode.py [--onnx DIR] [--sentences 2000] [--repeats 5]
    .venv/bin/python benchmarks/encode.py --model DIR --onnx DIR-onnx --backends st,onnx-fp32,onnx-int8
    .venv/bin/python benchmarks/encode.py --session-options   # also time ORT SessionOptions variants
    .venv/bin/python benchmarks/encode.py --fixed-shapes      # also ONNX fp32 padded to fixed shapes
    python benchmarks/encode.py --device cuda   # GPU: torch with CUDA and onnxruntime-gpu

On the default model (all-MiniLM-L6-v2, or `--model DIR` with `--onnx` its export) and a fixed mix
of ../shared/data sentences (STS-B, Cranfield queries, titles and abstract sentences), one run
measures, interleaved so that a change in machine load hits every backend alike:

- sentences/s of sentence-transformers `encode`, TorchEncoder, and OnnxEncoder fp32/fp16/int8,
  all length-sorted at batch 64 (median of `--repeats` full passes; each pass runs chunks of 500
  texts through every backend in rotating order), and each one's ratio to sentence-transformers;
- each one's minimum cosine with sentence-transformers' vectors of the same texts (equal vectors);
- STS-B test Spearman x100 (cosine vs gold, one correlation over all pairs, scipy) of each
  (`--no-sts` skips it).

A 1024x1024 float32 matmul probe (GFLOP/s) is printed first and last: figures taken while other
jobs share the cores show up as a low probe. Without `--onnx`, the model is exported first into a
temporary folder (fp16 + int8).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BATCH_SIZE = 64


def matmul_probe(size: int = 1024, repeats: int = 20) -> float:
    """GFLOP/s of a float32 size x size matmul (median), as numpy's BLAS sees the machine now."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b  # warm-up: thread pool start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times) / 1e9


def benchmark_texts(count: int, seed: int = 0) -> list[str]:
    """A fixed mix of sentences: half STS-B (train split), a tenth Cranfield queries, the rest
    Cranfield titles and abstract sentences (technical, up to ~100 tokens)."""
    from embedkit.data import read_beir, read_sts

    sts = read_sts(DATA / "sts" / "stsb-train.tsv")
    sentences = list(dict.fromkeys(sts.sentences1 + sts.sentences2))
    beir = read_beir(DATA / "cranfield")
    technical = []
    for doc in beir.corpus.values():
        technical.append(doc["title"].strip())
        technical += [s.strip() + " ." for s in doc["text"].split(" . ") if len(s.split()) >= 3]
    technical = list(dict.fromkeys(t for t in technical if t))
    queries = list(beir.queries.values())
    rng = random.Random(seed)
    n_sts, n_queries = count // 2, min(len(queries), count // 10)
    texts = rng.sample(sentences, n_sts) + rng.sample(queries, n_queries)
    texts += rng.sample(technical, count - len(texts))
    rng.shuffle(texts)
    return texts


def sts_spearman(encode: Callable[[list[str]], np.ndarray]) -> float:
    from scipy.stats import spearmanr

    from embedkit.data.sts import read_sts

    sts = read_sts(DATA / "sts" / "stsb-test.tsv")
    a, b = encode(sts.sentences1), encode(sts.sentences2)
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return 100.0 * float(spearmanr(np.sum(a * b, axis=1), sts.scores).statistic)


BACKENDS = ("st", "torch", "onnx-fp32", "onnx-fp16", "onnx-int8")


def make_backends(
    onnx_dir: Path,
    threads: int | None,
    device: str = "cpu",
    fixed_shapes: bool = False,
    model_dir: Path | None = None,
    chosen: tuple[str, ...] = BACKENDS,
) -> dict[str, Callable[[list[str]], np.ndarray]]:
    """On the CPU: ST, torch, ONNX fp32/fp16/int8. On CUDA: ST in fp32 and fp16, torch, and ONNX
    fp32/fp16 on ONNX Runtime's CUDA provider (dynamic int8 is a CPU format: not timed there).
    `fixed_shapes`: also ONNX fp32 with the other shape rule than the device's default
    (`embedkit.encode.shapes`: padded to buckets on a CPU, exact shapes on CUDA). `chosen`: which
    of `BACKENDS` to run (sentence-transformers always runs: it is the baseline)."""
    from sentence_transformers import SentenceTransformer

    from embedkit.encode.model_folder import default_base_model_path
    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.encode.torch_backend import TorchEncoder

    model_dir = model_dir or default_base_model_path()
    st = SentenceTransformer(str(model_dir), device=device)
    backends: dict[str, Callable[[list[str]], np.ndarray]] = {
        "sentence-transformers": lambda t: st.encode(t, batch_size=BATCH_SIZE, convert_to_numpy=True),
    }
    if device == "cuda":
        st_half = SentenceTransformer(str(model_dir), device=device).half()
        backends["sentence-transformers fp16"] = lambda t: st_half.encode(
            t, batch_size=BATCH_SIZE, convert_to_numpy=True
        ).astype(np.float32)
    if "torch" in chosen:
        torch_encoder = TorchEncoder(model_dir, device=device)
        backends["embedkit torch"] = lambda t: torch_encoder.encode(t, batch_size=BATCH_SIZE)
    for precision in ("fp32", "fp16") if device == "cuda" else ("fp32", "fp16", "int8"):
        if f"onnx-{precision}" not in chosen:
            continue
        encoder = OnnxEncoder(onnx_dir, device=device, precision=precision, intra_op_threads=threads)
        backends[f"onnx {precision}"] = lambda t, e=encoder: e.encode(t, batch_size=BATCH_SIZE)
    if fixed_shapes:
        other = device == "cpu"  # the rule the device does not use by default
        encoder = OnnxEncoder(
            onnx_dir, device=device, precision="fp32", intra_op_threads=threads, fixed_shapes=other
        )
        name = "onnx fp32 (fixed shapes)" if other else "onnx fp32 (exact shapes)"
        backends[name] = lambda t, e=encoder: e.encode(t, batch_size=BATCH_SIZE)
    return backends


def min_cosines(backends: dict[str, Callable[[list[str]], np.ndarray]], texts: list[str]) -> dict[str, float]:
    """Each backend's smallest row cosine with sentence-transformers' vectors of `texts`."""
    reference = backends["sentence-transformers"](texts)
    reference = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    out = {}
    for name, encode in backends.items():
        vectors = encode(texts)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        out[name] = float(np.min(np.sum(vectors * reference, axis=1)))
    return out


def session_option_backends(onnx_dir: Path) -> dict[str, Callable[[list[str]], np.ndarray]]:
    """fp32 and int8 with other graph optimization levels and thread counts than the default."""
    import onnxruntime as ort

    from embedkit.encode.onnx_backend import OnnxEncoder

    variants = {
        "basic": (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, None),
        "no-opt": (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, None),
        "1 thread": (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, 1),
        "2 threads": (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, 2),
    }
    backends: dict[str, Callable[[list[str]], np.ndarray]] = {}
    for precision in ("fp32", "int8"):
        for name, (level, threads) in variants.items():
            encoder = OnnxEncoder(onnx_dir, device="cpu", precision=precision)
            options = ort.SessionOptions()
            options.graph_optimization_level = level
            if threads is not None:
                options.intra_op_num_threads = threads
            file = onnx_dir / encoder.metadata["files"][precision]
            encoder.session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
            backends[f"onnx {precision} ({name})"] = lambda t, e=encoder: e.encode(t, batch_size=BATCH_SIZE)
    return backends


def time_backends(
    backends: dict[str, Callable[[list[str]], np.ndarray]], texts: list[str], repeats: int, chunk: int = 500
) -> dict[str, float]:
    """Median seconds per full pass over `texts`.

    Each pass encodes the texts in chunks of `chunk` (each chunk length-sorted by the encoder), and
    every chunk is run by every backend in turn, in a rotating order: the other jobs that share
    this machine's two cores come and go within seconds, and this way a burst of load falls on
    all backends alike instead of on whichever pass it happened to meet.
    """
    for encode in backends.values():
        encode(texts[:BATCH_SIZE])  # warm-up: thread pools, first-call allocations
    names = list(backends)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    pieces = [texts[i : i + chunk] for i in range(0, len(texts), chunk)]
    for repeat in range(repeats):
        total = dict.fromkeys(names, 0.0)
        for k, piece in enumerate(pieces):
            shift = (repeat * len(pieces) + k) % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                backends[name](piece)
                total[name] += time.perf_counter() - start
        for name in names:
            seconds[name].append(total[name])
    return {name: statistics.median(values) for name, values in seconds.items()}


def ensure_export(onnx_dir: Path | None, work: Path, model_dir: Path | None) -> Path:
    if onnx_dir is not None:
        return onnx_dir
    if model_dir is not None:
        sys.exit("error: --model needs --onnx, its `embedkit export --fp16 --int8` folder")
    from embedkit.export import export_model

    out = work / "minilm-onnx"
    print("exporting all-MiniLM-L6-v2 (fp16 + int8) ...", file=sys.stderr)
    export_model(None, out, fp16=True, int8=True, progress=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--onnx", type=Path, help="An `embedkit export --fp16 --int8` folder of the model."
    )
    parser.add_argument("--model", type=Path, help="The torch model folder (default: all-MiniLM-L6-v2).")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help=f"Comma-separated, of {', '.join(BACKENDS)} (st always runs).",
    )
    parser.add_argument("--no-sts", action="store_true", help="Skip the STS-B test Spearman.")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--session-options", action="store_true", help="Also time ORT SessionOptions variants."
    )
    parser.add_argument(
        "--fixed-shapes", action="store_true", help="Also ONNX fp32 with the other shape rule."
    )
    parser.add_argument("--threads", type=int, help="Threads for torch and ONNX Runtime (default: theirs).")
    parser.add_argument("--json", type=Path, help="Write the figures to this file too.")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda needs torch with CUDA and onnxruntime-gpu.",
    )
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"error: {DATA} not found (the benchmark reads ../shared/data)")

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    probe_before = matmul_probe()
    threads = torch.get_num_threads()
    print(f"matmul probe (1024x1024 float32): {probe_before:.1f} GFLOP/s; torch threads {threads}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("error: --device cuda, but torch sees no CUDA GPU")
        print(f"GPU: {torch.cuda.get_device_name(0)}")
    texts = benchmark_texts(args.sentences)
    with tempfile.TemporaryDirectory(prefix="embedkit-bench-") as work:
        onnx_dir = ensure_export(args.onnx, Path(work), args.model)
        chosen = tuple(args.backends.split(","))
        backends = make_backends(onnx_dir, args.threads, args.device, args.fixed_shapes, args.model, chosen)
        if args.session_options:
            backends.update(session_option_backends(onnx_dir))
        seconds = time_backends(backends, texts, args.repeats)
        cosines = min_cosines(backends, texts)
        quality = (
            {}
            if args.no_sts
            else {name: sts_spearman(encode) for name, encode in backends.items() if "(" not in name}
        )
    probe_after = matmul_probe()

    base = len(texts) / seconds["sentence-transformers"]
    rows = []
    for name, value in seconds.items():
        rate = len(texts) / value
        rows.append(
            {
                "backend": name,
                "sent_per_s": rate,
                "ratio_to_st": rate / base,
                "min_cosine_to_st": cosines[name],
                "stsb_test": quality.get(name),
            }
        )
    print(f"{len(texts)} texts (chunks of 500), batch {BATCH_SIZE}, median of {args.repeats} passes")
    print(f"{'backend':<28} {'sent/s':>8} {'x ST':>6} {'min cos':>9} {'STS-B test':>10}")
    for row in rows:
        sts = f"{row['stsb_test']:.2f}" if row["stsb_test"] is not None else "-"
        print(
            f"{row['backend']:<28} {row['sent_per_s']:>8.1f} {row['ratio_to_st']:>6.2f} "
            f"{row['min_cosine_to_st']:>9.6f} {sts:>10}"
        )
    print(f"matmul probe after: {probe_after:.1f} GFLOP/s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"probe_gflops": [probe_before, probe_after], "texts": len(texts), "rows": rows}, indent=2
            )
        )


if __name__ == "__main__":
    main()
