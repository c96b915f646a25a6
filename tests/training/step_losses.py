"""The per-step losses of `embedkit train` for every method on a tiny model: how the recorded figures
in `step_losses.json` were made, and how a test makes them again.

    .venv/bin/python tests/training/step_losses.py    # rewrites tests/training/step_losses.json

Each run is the CLI on CPU, one torch thread, over `training_runs.CORPUS` (12 sentences), batch 4,
6 steps (the queue of 6 keys fills and wraps), seed 42, on the tiny BERT of `make_tiny_bert` (seed 0,
dropout 0.1, 4 layers: AMI reads layers 2 and 3). Matryoshka's prefixes (8 and 4) stay within the 11 principal
axes that the 12 documents determine: the other 21 span a null space whose axes float rounding
turns at will. The losses are read from the run's
`metrics.jsonl`, one record per step on CPU. The figures were recorded with the step as it was
before its objective became a list of terms and its attention the fused kernel outside AMI's
layers; the test holds every later step to them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "step_losses.json"
STEPS = 6

# run name -> the CLI's arguments after the common ones: each method and ablation of the CLI
RUNS: dict[str, list[str]] = {
    "simcse": ["--method", "simcse"],
    "ami-simcse": ["--method", "ami-simcse"],
    "moco-simcse": ["--method", "moco-simcse"],
    "micse": ["--method", "micse"],
    "informin": ["--method", "micse", "--reconstruction-weight", "0.1"],
    "infocse": ["--method", "infocse", "--set", "aux_stage1_steps=3"],
    "micse-aux": ["--method", "micse", "--aux-mlm-weight", "0.01", "--set", "aux_stage1_steps=3"],
    "matryoshka": (  # noqa: SIM905 (one command line reads best as one string)
        "--method micse --matryoshka 32,8,4 --matryoshka-weights 1,0.5,0.25 "
        "--set matryoshka_similarity=0.1 --set matryoshka_rotation_docs=12"
    ).split(),
}


def step_losses(run: str, base: Path, work: Path) -> list[dict[str, float]]:
    """The loss terms of each step of `run` (`loss` and each weighted term), from its metrics."""
    import torch
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    sys.path.insert(0, str(HERE.parent))
    from training_runs import CORPUS

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = work / run
    args = ["train", str(corpus), "--out", str(out), "--base", str(base), "--device", "cpu"]
    args += ["--batch-size", "4", "--max-steps", str(STEPS), "--epochs", "100", "--seed", "42"]
    args += ["--set", "queue_size=6", "--quiet", *RUNS[run]]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        torch.set_num_threads(threads)
    if result.exit_code != 0:
        raise RuntimeError(f"{run}: exit {result.exit_code}: {result.output}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "lr" in r]
    skip = {"step", "epoch", "lr", "queue", "sentences_per_s", "seconds"}
    return [{k: v for k, v in r.items() if k not in skip} for r in steps]


def main() -> None:
    sys.path.insert(0, str(HERE.parent))
    from tiny_models import make_tiny_bert

    with tempfile.TemporaryDirectory() as tmp:
        base = make_tiny_bert(Path(tmp) / "tiny-bert")
        figures = {run: step_losses(run, base, Path(tmp)) for run in RUNS}
    FIXTURE.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}: {', '.join(f'{k} ({len(v)} steps)' for k, v in figures.items())}")


if __name__ == "__main__":
    main()
