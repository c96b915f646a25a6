"""The GPU half against its ceiling: encode, tokenization, torch, sentence-transformers and serve, one run.

    python benchmarks/gpu.py --json gpu.json                  # CUDA fp16, the bundled model (exported first)
    python benchmarks/gpu.py --model EXPORT --json gpu.json   # an `embedkit export --fp16` folder
    python benchmarks/gpu.py --device cpu --quick             # every row on the CPU at tiny sizes

Texts: the unique texts of ../shared/data, in this order: the Wikipedia sample, STS-B train's
sentences, the Cranfield and msmarco-5k passages (28,481 texts, 38.6 tokens on average with
all-MiniLM-L6-v2's tokenizer). Rows, each in sentences/s beside its ratio to the ceiling, measured
in this order (the encoder first, so that its first pass meets shapes no session has run):

- `encode_first`: `load_encoder(model, device, precision).encode(texts, batch_size)` on an encoder
  just opened (its load, warm-up included, is `load_s`): texts and shapes new to it;
- `encode_later`: the last of `--passes` passes over the same texts (every shape seen before);
- `ceiling`: the ONNX graph alone in a session of its own, fed pre-tokenized, length-sorted, padded
  batches of `--batch-size` (NumPy in and out; tokenizing and padding happen before the clock),
  after one untimed pass over the same shapes; median of `--repeats` passes;
- `torch`: the source model in torch (fp16 on CUDA, fp32 on the CPU) on the same kind of batches,
  already on the device; `tokenize`: `tokenizers`' `encode_batch` over the texts (all cores);
- `sentence_transformers`: `SentenceTransformer.encode` (fp16 on CUDA) at each `--st-batch-sizes`,
  the best;
- `serve_32x1`, `serve_32x64`, `serve_128x1`: `embedkit serve` of the same model, precision and
  device under closed-loop load (benchmarks/serve.py's client): clients x texts a request; texts/s,
  p50/p99 latency, and `of_offline`, the share of `encode_later`'s rate.

On the CPU (`--device cpu`) precision defaults to fp32 and torch and sentence-transformers run fp32:
the same rows, for testing the benchmark where there is no GPU; they are no GPU figures.
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CELLS = ((32, 1), (32, 64), (128, 1))  # (clients, texts a request), as the GPU-speed goals name them
ROWS = (
    "encode_first",
    "encode_later",
    "ceiling",
    "torch",
    "tokenize",
    "sentence_transformers",
    *(f"serve_{c}x{s}" for c, s in CELLS),
)


def corpus_texts(limit: int | None = None) -> list[str]:
    """The unique, non-blank texts of the four sources (with `limit`: a fixed-seed sample of them)."""
    from embedkit.data import read_sts

    wiki = (DATA / "corpora" / "wiki1m-sample.txt").read_text(encoding="utf-8").splitlines()
    sts = read_sts(DATA / "sts" / "stsb-train.tsv")
    passages = []
    for name in ("cranfield", "msmarco-5k"):
        with (DATA / name / "corpus.jsonl").open(encoding="utf-8") as f:
            passages += [json.loads(line)["text"] for line in f if line.strip()]
    texts = list(dict.fromkeys(t.strip() for t in [*wiki, *sts.sentences1, *sts.sentences2, *passages]))
    texts = [t for t in texts if t]
    return random.Random(0).sample(texts, limit) if limit and limit < len(texts) else texts


def padded_batches(tokenizer, pad_id: int, texts: list[str], batch_size: int) -> list[dict[str, np.ndarray]]:
    """Length-sorted batches of token ids, mask and type ids, padded to each batch's longest (B, T)."""
    encodings = tokenizer.encode_batch(texts)
    lengths = np.array([len(e.ids) for e in encodings])
    order = np.argsort(-lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = int(lengths[rows].max())
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for r, i in enumerate(rows):
            n = lengths[i]
            ids[r, :n], mask[r, :n], types[r, :n] = encodings[i].ids, 1, encodings[i].type_ids
        batches.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    return batches


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_encode(model: Path, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    """load_s, then the first and the last of `--passes` passes of `encode`, each split into its
    stages (`host_split`)."""
    import host_split  # benchmarks/host_split.py, beside this file

    from embedkit import load_encoder

    start = time.perf_counter()
    encoder = load_encoder(model, device=args.device, precision=args.precision)
    load_s = time.perf_counter() - start
    passes = [host_split.timed_pass(encoder, texts, args.batch_size) for _ in range(max(1, args.passes))]
    return {
        "load_s": load_s,
        "first": passes[0]["wall_s"],
        "later": passes[-1]["wall_s"],
        "max_seq_length": encoder.max_seq_length,
        "first_split": passes[0],
        "split": passes[-1],
    }


def measure_ceiling(model: Path, texts: list[str], args: argparse.Namespace) -> tuple[float, float]:
    """Seconds of the ONNX graph alone over pre-tokenized batches, and the texts' mean token count."""
    from embedkit.encode.batching import load_tokenizer, pad_token_id
    from embedkit.encode.onnx_backend import (
        OUTPUT_NAME,
        create_session,
        precision_files,
        read_export_metadata,
    )

    meta = read_export_metadata(model)
    session, _ = create_session(model / precision_files(meta)[args.precision], args.device)
    tokenizer = load_tokenizer(model, int(meta["max_seq_length"]))
    batches = padded_batches(tokenizer, pad_token_id(model, tokenizer), texts, args.batch_size)
    names = {i.name for i in session.get_inputs()}
    feeds = [{k: v for k, v in b.items() if k in names} for b in batches]

    def run() -> None:
        for feed in feeds:
            session.run([OUTPUT_NAME], feed)

    run()  # untimed: the provider meets every shape once
    mean_tokens = float(sum(b["attention_mask"].sum() for b in batches) / len(texts))
    return median_seconds(run, args.repeats), mean_tokens


def measure_tokenize(model: Path, texts: list[str], max_seq_length: int, repeats: int) -> float:
    from embedkit.encode.batching import load_tokenizer

    tokenizer = load_tokenizer(model, max_seq_length)
    tokenizer.encode_batch(texts[:256])  # its thread pool started
    return median_seconds(lambda: tokenizer.encode_batch(texts), repeats)


def measure_torch(torch_model: Path, texts: list[str], args: argparse.Namespace) -> float:
    """Seconds of the torch model and its pooling head alone, inputs already on the device."""
    import torch

    from embedkit.encode.torch_backend import TorchEncoder

    encoder = TorchEncoder(torch_model, device=args.device)
    model, head = encoder.model, encoder.head
    if encoder.device.type == "cuda":
        model, head = model.half(), head.half()
    batches = padded_batches(encoder.batcher.tokenizer, encoder.batcher.pad_id, texts, args.batch_size)
    keys = ["input_ids", "attention_mask", *(["token_type_ids"] if encoder.uses_token_type_ids else [])]
    inputs = [{k: torch.from_numpy(b[k]).to(encoder.device) for k in keys} for b in batches]

    @torch.inference_mode()
    def run() -> None:
        for x in inputs:
            head(model(**x).last_hidden_state, x["attention_mask"], True)
        if encoder.device.type == "cuda":
            torch.cuda.synchronize(encoder.device)

    run()
    return median_seconds(run, args.repeats)


def measure_st(torch_model: Path, texts: list[str], args: argparse.Namespace) -> tuple[float, int]:
    """The best seconds of sentence-transformers' `encode` over `--st-batch-sizes`, and that batch size."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(torch_model), device=args.device)
    if args.device == "cuda":
        model = model.half()
    best: tuple[float, int] | None = None
    for size in args.st_batch_sizes:
        model.encode(texts[:size], batch_size=size)  # warm-up: kernels, allocator
        seconds = median_seconds(lambda size=size: model.encode(texts, batch_size=size), args.repeats)
        if best is None or seconds < best[0]:
            best = (seconds, size)
    assert best is not None
    return best


def row(name: str, label: str, texts: int, seconds: float, **extra: object) -> dict:
    return {
        "name": name,
        "label": label,
        "texts": texts,
        "seconds": seconds,
        "per_s": texts / seconds,
        **extra,
    }


def run(args: argparse.Namespace, model: Path, torch_model: Path) -> dict:
    texts = corpus_texts(args.texts)
    n = len(texts)
    print(
        f"{n:,} texts; device {args.device}, precision {args.precision}, batch {args.batch_size}", flush=True
    )
    started = time.perf_counter()
    rows: list[dict] = []

    def measured(name: str, label: str, seconds: float, **extra: object) -> None:
        rows.append(row(name, label, n, seconds, **extra))
        elapsed = time.perf_counter() - started
        print(f"  {label}: {n / seconds:,.0f} sentences/s ({elapsed:.0f} s into the run)", flush=True)

    import host_split  # benchmarks/host_split.py, beside this file

    encode = measure_encode(model, texts, args)
    measured("encode_first", f"load_encoder({args.precision}).encode, first pass", encode["first"])
    print(f"    its stages: {host_split.describe(encode['first_split'])}", flush=True)
    measured("encode_later", f"the same, pass {args.passes} (shapes seen)", encode["later"])
    print(f"    its stages: {host_split.describe(encode['split'])}", flush=True)
    ceiling_s, mean_tokens = measure_ceiling(model, texts, args)
    measured("ceiling", f"ONNX {args.precision} graph alone, pre-tokenized batches", ceiling_s)
    dtype = "fp16" if args.device == "cuda" else "fp32"
    measured("torch", f"torch {dtype} model alone, same batches", measure_torch(torch_model, texts, args))
    max_length = int(encode["max_seq_length"])
    measured(
        "tokenize", "tokenizers encode_batch alone", measure_tokenize(model, texts, max_length, args.repeats)
    )
    st_s, st_batch = measure_st(torch_model, texts, args)
    label = f"sentence-transformers {dtype} encode, batch {st_batch}"
    measured("sentence_transformers", label, st_s, batch_size=st_batch)
    by_name = {r["name"]: r for r in rows}
    offline = by_name["encode_later"]["per_s"]  # the offline rate a server is held against
    import gpu_serve  # benchmarks/gpu_serve.py, beside this file

    serve, serve_error = gpu_serve.serve_rows(model, texts, args, CELLS, offline, row)
    rows += serve
    ceiling = by_name["ceiling"]["per_s"]
    for r in rows:
        r["ratio_to_ceiling"] = r["per_s"] / ceiling
    return {
        "benchmark": "gpu",
        "date": time.strftime("%Y-%m-%d"),
        "device": args.device,
        "device_name": device_name(args.device),
        "precision": args.precision,
        "model": str(model),
        "torch_model": str(torch_model),
        "texts": n,
        "mean_tokens": mean_tokens,
        "batch_size": args.batch_size,
        "passes": args.passes,
        "repeats": args.repeats,
        "quick": args.quick,
        "load_s": encode["load_s"],
        "encode_first_split": encode["first_split"],
        "encode_split": encode["split"],
        "serve_error": serve_error,
        "versions": version_lines(),
        "rows": rows,
    }


def device_name(device: str) -> str:
    import platform

    if device != "cuda":
        return platform.processor() or platform.machine()
    import torch

    return torch.cuda.get_device_name(0)


def version_lines() -> list[str]:
    from embedkit.versions import version_lines as lines

    return lines()


def table(report: dict) -> str:
    lines = [
        f"{report['texts']:,} texts, {report['mean_tokens']:.1f} tokens on average; {report['device_name']} "
        f"({report['device']}), {report['precision']}, batch {report['batch_size']}; encoder load "
        f"{report['load_s']:.1f} s",
        "",
        "| path | sentences/s | of ceiling | notes |",
        "| --- | --- | --- | --- |",
    ]
    for r in report["rows"]:
        notes = []
        if "p99_ms" in r and r["p99_ms"] is not None:
            notes.append(
                f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, {r['of_offline']:.2f} of offline"
            )
        lines.append(
            f"| {r['label']} | {r['per_s']:,.0f} | {r['ratio_to_ceiling']:.3f} | {'; '.join(notes)} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--model", type=Path, help="ONNX export (default: --torch-model exported first)")
    parser.add_argument(
        "--torch-model", type=Path, help="the export's source model (default: the bundled one)"
    )
    parser.add_argument("--precision", help="fp16 on cuda, fp32 on cpu by default")
    parser.add_argument("--batch-size", type=int, help="encode and ceiling batch (default 1024; --quick 32)")
    parser.add_argument("--texts", type=int, help="a fixed-seed sample of this many texts (default all)")
    parser.add_argument("--passes", type=int, help="encode passes; the last is 'later' (default 3)")
    parser.add_argument("--repeats", type=int, help="timed passes of the other rows, median (default 3)")
    parser.add_argument("--st-batch-sizes", help="comma-separated (default 128,512)")
    parser.add_argument("--serve-duration", type=float, help="seconds a serve cell is counted (default 10)")
    parser.add_argument("--serve-warmup", type=float, help="seconds before it (default 2)")
    parser.add_argument("--serve-option", action="append", default=[], help="extra `embedkit serve` option")
    parser.add_argument("--no-serve", action="store_true", help="skip the serve rows")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the benchmark's own test")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    # defaults: (full run, --quick)
    for name, full, quick in (
        ("batch_size", 1024, 32),
        ("texts", None, 96),
        ("passes", 3, 2),
        ("repeats", 3, 1),
        ("st_batch_sizes", "128,512", "64"),
        ("serve_duration", 10.0, 1.0),
        ("serve_warmup", 2.0, 0.3),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.st_batch_sizes = [int(s) for s in str(args.st_batch_sizes).split(",")]
    args.precision = args.precision or ("fp16" if args.device == "cuda" else "fp32")
    return args


def main() -> None:
    args = parse_args()
    if not DATA.is_dir():
        print(f"error: {DATA} not found (the benchmark reads ../shared/data)", file=sys.stderr)
        sys.exit(2)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "error: --device cuda, but torch sees no CUDA GPU (--device cpu runs every row there)",
                file=sys.stderr,
            )
            sys.exit(2)
    from embedkit.encode.model_folder import default_base_model_path

    torch_model = args.torch_model or default_base_model_path()
    with tempfile.TemporaryDirectory(prefix="embedkit-gpu-bench-") as work:
        model = args.model
        if model is None:
            from embedkit.export import export_model

            print(f"exporting {torch_model} ({args.precision}) ...", file=sys.stderr, flush=True)
            fp16 = args.precision == "fp16"
            model = export_model(
                torch_model, Path(work) / "onnx", fp16=fp16, device=args.device, progress=False
            ).out_dir
        report = run(args, Path(model), Path(torch_model))
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
