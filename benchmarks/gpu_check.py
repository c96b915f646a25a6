"""`make gpu-check`: the GPU half proved on one CUDA machine, each figure printed against its goal.

    python benchmarks/gpu_check.py [--json gpu-check.json] [--no-train-1m] [--work DIR]

Needs CUDA (torch sees a GPU and onnxruntime has its CUDA provider); without it, one line and exit 2.
Each step runs in its own process, in this order, and a failed step fails its rows only:

1. `embedkit export --fp16 --device cuda` of the bundled model: the fp16 parity gate on CUDA;
2. benchmarks/gpu.py on that export: encode and serve against the ONNX graph's ceiling and
   sentence-transformers fp16, in the same run;
3. benchmarks/train_step.py (simcse and micse, bf16, batch 64, length 32, fixed shapes, whole steps
   timed as the trainer runs them): miCSE's step; then the same two methods' steps timed in their
   parts (views forward, momentum forward, loss, backward, optimizer), printed below the row;
4. `embedkit train --nproc N` (N: the GPUs torch sees), a short run;
5. where faiss has GPU support: benchmarks/search.py --device cuda (flat, 1M x 384, 1,000 queries,
   against faiss-cpu on all cores), then `embedkit index --device cuda` of Cranfield and its search on
   the GPU against the CPU's for the same query vectors (SKIP where faiss has no GPU support);
6. unless `--no-train-1m`: `embedkit train` over one million sentences (micse, batch 64: 84 epochs of the
   11,914 Wikipedia sentences, since the corpus loader drops repeated lines).

Each row: its figure, its goal, PASS, FAIL (with the reason) or SKIP. Exit 0 when no row failed, 1
otherwise. `GOALS` is the one list of the goals (the GPU-speed and training-speed goals: H100 or
H200, said in the output's device line).
"""

from __future__ import annotations

import argparse
import json
import operator
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WIKI = DATA / "corpora" / "wiki1m-sample.txt"
ONE_MILLION_EPOCHS = 84  # 84 x 11,914 sentences = 1,000,776: one million sentences of training


@dataclass(frozen=True)
class Goal:
    step: str  # the step that measures it
    key: str  # the figure's name
    label: str
    op: str  # ">=" or "<="
    target: float
    unit: str = ""


# The goals, in one place. micse_step_ms: "2x faster than 30.7 ms at batch 64" (the H200 figure).
GOALS = (
    Goal("export", "export_ok", "export fp16, parity gate on CUDA (1 = passed)", ">=", 1),
    Goal("gpu", "encode_first_per_s", "encode fp16, first pass over fresh texts", ">=", 100_000, " sent/s"),
    Goal("gpu", "encode_first_of_ceiling", "  the same, share of the ONNX graph's ceiling", ">=", 0.65),
    Goal("gpu", "encode_first_over_st", "  the same, over sentence-transformers fp16", ">=", 15, "x"),
    Goal("gpu", "serve_32x64_per_s", "serve, 32 clients x 64 texts", ">=", 50_000, " texts/s"),
    Goal("gpu", "serve_32x1_p99_ms", "serve, 32 clients x 1 text, p99", "<=", 25, " ms"),
    Goal("gpu", "serve_128x1_of_offline", "serve, 128 clients x 1 text, share of offline", ">=", 0.7),
    Goal("train_step", "micse_over_simcse", "micse step over simcse's (bf16, batch 64)", "<=", 1.3, "x"),
    Goal("train_step", "micse_step_ms", "micse step at batch 64 (half of 30.7 ms)", "<=", 15.35, " ms"),
    Goal("nproc", "nproc_ok", "train --nproc (1 = ran and wrote the model)", ">=", 1),
    Goal("faiss", "faiss_flat_x_cpu", "faiss GPU flat search 1M x 384 over faiss-cpu", ">=", 10, "x"),
    Goal("faiss", "faiss_flat_recall", "  the same, recall@10 against faiss-cpu's exact", ">=", 0.999),
    Goal("faiss", "faiss_index_same_top10", "index/search --device cuda: the CPU's top 10", ">=", 0.999),
    Goal("train_1m", "train_1m_s", "train 1M sentences (micse, batch 64, one GPU)", "<=", 300, " s"),
)
OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


class StepFailed(Exception):
    """A step that could not produce its figures; the message is its reason, one line."""


@dataclass(frozen=True)
class Verdict:
    goal: Goal
    value: float | None
    status: str  # PASS, FAIL or SKIP
    note: str = ""

    def line(self) -> str:
        g = self.goal
        value = "-" if self.value is None else f"{self.value:,.4g}{g.unit}"
        goal = f"{g.op} {g.target:,.4g}{g.unit}"
        note = f"  ({self.note})" if self.note else ""
        return f"{self.status:<4}  {g.label:<52} {value:>16}  goal {goal}{note}"


def judge(goal: Goal, figures: dict[str, float], reasons: dict[str, str]) -> Verdict:
    """A goal against the figures: SKIP where its step was skipped, FAIL where its figure is missing."""
    reason = reasons.get(goal.step, "")
    if reason.startswith("skipped"):
        return Verdict(goal, None, "SKIP", reason)
    value = figures.get(goal.key)
    if value is None:
        return Verdict(goal, None, "FAIL", reason or "not measured")
    return Verdict(goal, value, "PASS" if OPS[goal.op](value, goal.target) else "FAIL")


def cuda_problem() -> str | None:
    """Why this machine cannot prove the GPU half, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU here"
    from embedkit.encode.onnx_backend import cuda_listed

    if not cuda_listed():
        return "onnxruntime has no CUDAExecutionProvider (pip install 'embedkit[gpu]')"
    return None


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`command` to its end; a non-zero exit is a `StepFailed` with its last line of output.

    It runs in the temporary folder, never in the checkout: there `python -m embedkit.cli` would
    import the checkout's `embedkit/` folder (the runtime core alone, without `cli`) before an
    embedkit installed from a wheel, and fail (a launcher started in a checkout failed so on the
    first GPU machine this ran on)."""
    try:
        done = subprocess.run(
            command, cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise StepFailed(f"{Path(command[1]).name} ran past {timeout:.0f} s") from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise StepFailed(f"exit {done.returncode}: {lines[-1] if lines else 'no output'}")
    return done


def embedkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "embedkit.cli", *args]


# --- the steps: each returns its figures ----------------------------------------------------------


def step_export(work: Path) -> dict[str, float]:
    from embedkit.encode.model_folder import default_base_model_path

    run(
        embedkit(
            "export",
            str(default_base_model_path()),
            "--out",
            str(work / "onnx"),
            "--fp16",
            "--device",
            "cuda",
        ),
        600,
    )
    return {"export_ok": 1.0}


def gpu_figures(report: dict) -> dict[str, float]:
    """The goals' figures in a benchmarks/gpu.py report (absent where its row is)."""
    rows = {r["name"]: r for r in report["rows"]}
    figures: dict[str, float] = {}
    if "encode_first" in rows:
        first = rows["encode_first"]
        figures["encode_first_per_s"] = first["per_s"]
        figures["encode_first_of_ceiling"] = first["ratio_to_ceiling"]
        if "sentence_transformers" in rows:
            figures["encode_first_over_st"] = first["per_s"] / rows["sentence_transformers"]["per_s"]
    if "serve_32x64" in rows:
        figures["serve_32x64_per_s"] = rows["serve_32x64"]["per_s"]
    if rows.get("serve_32x1", {}).get("p99_ms") is not None:
        figures["serve_32x1_p99_ms"] = rows["serve_32x1"]["p99_ms"]
    if "serve_128x1" in rows:
        figures["serve_128x1_of_offline"] = rows["serve_128x1"]["of_offline"]
    return figures


def step_gpu(work: Path) -> dict[str, float]:
    out = work / "gpu.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu.py"),
        "--device",
        "cuda",
        "--model",
        str(work / "onnx"),
    ]
    run([*command, "--repeats", "2", "--json", str(out)], 900)
    report = json.loads(out.read_text())
    if report.get("serve_error"):
        print(f"      serve: {report['serve_error']}", flush=True)
    return gpu_figures(report)


def step_train_step(work: Path) -> dict[str, float]:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "train_step.py"),
        "--device",
        "cuda",
        "--dtype",
        "bf16",
        # as `embedkit train` runs on CUDA: one padded shape, no device sync inside a step
        "--fixed-shapes",
        "--whole-step",
    ]
    done = run([*command, "--steps", "30", "--warmup", "5", "--methods", "simcse,micse", "--no-memory"], 600)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # the step's parts, each timed with a device sync at its edges (slower than the whole step)
    parts_command = [c for c in command if c != "--whole-step"]
    parts_command += ["--steps", "10", "--warmup", "3", "--methods", "simcse,micse", "--no-memory"]
    parts = run(parts_command, 600)
    for name, method in json.loads(parts.stdout.strip().splitlines()[-1])["methods"].items():
        sections = ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in method["median_section_s"].items())
        print(f"      {name} step in parts: {sections}", flush=True)
    return {
        "micse_over_simcse": report["micse_over_simcse"],
        "micse_step_ms": 1000 * report["methods"]["micse"]["median_step_s"],
    }


def step_nproc(work: Path) -> dict[str, float]:
    import torch

    nproc = str(torch.cuda.device_count())
    out = work / "nproc"
    run(
        embedkit(
            "train",
            str(WIKI),
            "--out",
            str(out),
            "--nproc",
            nproc,
            "--max-steps",
            "20",
            "--device",
            "cuda",
            "--quiet",
        ),
        600,
    )
    if not (out / "config.json").is_file():
        raise StepFailed(f"train --nproc {nproc} exited 0 but wrote no model in {out}")
    return {"nproc_ok": 1.0}


def step_faiss(work: Path) -> dict[str, float]:
    import numpy as np

    from embedkit.index import SearchIndex
    from embedkit.index.faiss_gpu import GPU_EXTRA, faiss_gpu_count

    if faiss_gpu_count() < 1:
        raise StepFailed(f"skipped: faiss here has no GPU support ({GPU_EXTRA})")
    out = work / "search.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--device", "cuda", "--kinds", "flat"]
    run([*command, "--n", "1000000", "--queries", "1000", "--single", "100", "--json", str(out)], 900)
    (gpu_row,) = [r for r in json.loads(out.read_text())["devices"] if r["device"] != "cpu"]
    index_dir = work / "cranfield-index"
    run(
        embedkit(
            "index", str(DATA / "cranfield"), "--out", str(index_dir), "--kind", "flat", "--device", "cuda"
        ),
        600,
    )
    run(embedkit("search", str(index_dir), "shock waves on a wing", "--device", "cuda", "--json"), 300)
    queries = np.random.default_rng(0).standard_normal((1000, 384)).astype(np.float32)
    with SearchIndex.load(index_dir, device="cuda") as on_gpu, SearchIndex.load(index_dir) as on_cpu:
        _, gpu_ids = on_gpu.search(queries, k=10)
        _, cpu_ids = on_cpu.search(queries, k=10)
    same = sum(len(set(g) & set(c)) for g, c in zip(gpu_ids, cpu_ids, strict=True)) / (10 * len(queries))
    return {
        "faiss_flat_x_cpu": gpu_row["x_cpu_batched"],
        "faiss_flat_recall": gpu_row["recall@10"],
        "faiss_index_same_top10": same,
    }


def step_train_1m(work: Path) -> dict[str, float]:
    out = work / "train-1m"
    command = embedkit("train", str(WIKI), "--out", str(out), "--method", "micse", "--batch-size", "64")
    start = time.perf_counter()
    run(
        [*command, "--epochs", str(ONE_MILLION_EPOCHS), "--max-steps", "0", "--device", "cuda", "--quiet"],
        3600,
    )
    return {"train_1m_s": time.perf_counter() - start}


STEPS: dict[str, Callable[[Path], dict[str, float]]] = {
    "export": step_export,
    "gpu": step_gpu,
    "train_step": step_train_step,
    "nproc": step_nproc,
    "faiss": step_faiss,
    "train_1m": step_train_1m,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write the figures and verdicts here")
    parser.add_argument(
        "--no-train-1m", action="store_true", help="leave out one million sentences of training (minutes)"
    )
    parser.add_argument(
        "--work", type=Path, help="keep the step's outputs here (default: a temporary folder)"
    )
    parser.add_argument("--steps", default=",".join(STEPS), help="which steps")
    args = parser.parse_args()
    problem = cuda_problem()
    if problem:
        print(f"error: gpu-check proves the GPU half and needs CUDA: {problem}", file=sys.stderr)
        sys.exit(2)
    import torch

    names = [s.strip() for s in args.steps.split(",") if s.strip()]
    names = [s for s in names if not (args.no_train_1m and s == "train_1m")]
    unknown = [s for s in names if s not in STEPS]
    if unknown:
        print(f"error: unknown step {unknown[0]!r}: use {', '.join(STEPS)}", file=sys.stderr)
        sys.exit(2)
    print(f"gpu-check on {torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} GPU(s))", flush=True)
    figures: dict[str, float] = {}
    reasons = {s: "skipped: not asked for" for s in STEPS if s not in names}
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="embedkit-gpu-check-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            start = time.perf_counter()
            try:
                figures.update(STEPS[name](work))
            except StepFailed as exc:
                reasons[name] = str(exc)
            print(f"[{name}: {time.perf_counter() - start:.0f} s]", flush=True)
            for goal in GOALS:
                if goal.step == name:
                    verdicts.append(judge(goal, figures, reasons))
                    print(verdicts[-1].line(), flush=True)
    verdicts += [judge(g, figures, reasons) for g in GOALS if g.step not in names]
    failed = [v for v in verdicts if v.status == "FAIL"]
    print(
        f"{len(failed)} of {len(verdicts)} rows failed"
        if failed
        else f"all {len(verdicts)} rows passed or skipped"
    )
    if args.json:
        record = {
            "device": torch.cuda.get_device_name(0),
            "date": time.strftime("%Y-%m-%d"),
            "figures": figures,
            "rows": [
                {"key": v.goal.key, "value": v.value, "status": v.status, "note": v.note} for v in verdicts
            ],
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
