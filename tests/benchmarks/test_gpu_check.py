"""`make gpu-check` (benchmarks/gpu_check.py): its refusal without CUDA, its verdicts, its reading of
benchmarks/gpu.py's report, and its orchestration of steps (faked: no GPU here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check(load_benchmark):
    return load_benchmark("gpu_check")


def no_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")


def test_without_cuda_it_refuses_in_one_line_exit_2():
    no_cuda()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: gpu-check proves the GPU half and needs CUDA: torch sees no CUDA GPU here"
    ]


def test_make_gpu_check_is_that_command():
    no_cuda()
    if shutil.which("make") is None:
        pytest.skip("no make here")
    done = subprocess.run(
        ["make", "-s", "gpu-check", f"GPU_PYTHON={sys.executable}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2  # make passes the script's exit code on as its own failure
    assert "error: gpu-check proves the GPU half and needs CUDA" in done.stderr


def test_steps_run_outside_the_checkout(check):
    """`python -m embedkit.cli` started in the checkout imports its `embedkit/` folder, which has
    no `cli` where embedkit is installed from a wheel: the steps run elsewhere."""
    done = check.run([sys.executable, "-c", "import os; print(os.getcwd())"], 60)
    here = Path(done.stdout.strip()).resolve()
    assert here != ROOT.resolve() and ROOT.resolve() not in here.parents


def test_cuda_problem_names_what_is_missing(check, monkeypatch):
    import torch

    import embedkit.encode.onnx_backend as onnx_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(onnx_backend, "cuda_listed", lambda: False)
    assert check.cuda_problem() == "onnxruntime has no CUDAExecutionProvider (pip install 'embedkit[gpu]')"
    monkeypatch.setattr(onnx_backend, "cuda_listed", lambda: True)
    assert check.cuda_problem() is None


def test_verdicts(check):
    at_least = check.Goal("gpu", "rate", "rate", ">=", 100)
    at_most = check.Goal("gpu", "p99", "p99", "<=", 25, " ms")
    skipped = check.Goal("faiss", "x", "x", ">=", 10)
    figures = {"rate": 100.0, "p99": 25.5}
    reasons = {"faiss": "skipped: faiss here has no GPU support"}
    assert check.judge(at_least, figures, reasons).status == "PASS"  # the goal itself passes
    assert check.judge(at_least, {"rate": 99.9}, reasons).status == "FAIL"
    assert check.judge(at_most, figures, reasons).status == "FAIL"
    assert check.judge(at_most, {"p99": 24.0}, reasons).status == "PASS"
    assert (check.judge(skipped, figures, reasons).status, check.judge(skipped, figures, reasons).note) == (
        "SKIP",
        "skipped: faiss here has no GPU support",
    )
    failed = check.judge(at_least, {}, {"gpu": "exit 1: error: CUDA was requested"})
    assert (failed.status, failed.value, failed.note) == ("FAIL", None, "exit 1: error: CUDA was requested")
    assert "not measured" in check.judge(at_least, {}, {}).line()


def test_every_goal_belongs_to_a_step_and_has_one_key(check):
    assert {g.step for g in check.GOALS} == set(check.STEPS)
    keys = [g.key for g in check.GOALS]
    assert len(keys) == len(set(keys)) and all(g.op in check.OPS for g in check.GOALS)


def test_the_goals_figures_from_a_gpu_report(check):
    rows = [
        {"name": "encode_first", "per_s": 120_000.0, "ratio_to_ceiling": 0.8},
        {"name": "ceiling", "per_s": 150_000.0, "ratio_to_ceiling": 1.0},
        {"name": "sentence_transformers", "per_s": 6_000.0, "ratio_to_ceiling": 0.04},
        {"name": "serve_32x1", "per_s": 900.0, "p99_ms": 12.5, "of_offline": 0.01},
        {"name": "serve_32x64", "per_s": 60_000.0, "p99_ms": 40.0, "of_offline": 0.6},
        {"name": "serve_128x1", "per_s": 3_000.0, "p99_ms": 50.0, "of_offline": 0.75},
    ]
    assert check.gpu_figures({"rows": rows}) == {
        "encode_first_per_s": 120_000.0,
        "encode_first_of_ceiling": 0.8,
        "encode_first_over_st": 20.0,  # 120,000 / 6,000
        "serve_32x64_per_s": 60_000.0,
        "serve_32x1_p99_ms": 12.5,
        "serve_128x1_of_offline": 0.75,
    }
    assert check.gpu_figures({"rows": rows[:3]}).keys() == {
        "encode_first_per_s",
        "encode_first_of_ceiling",
        "encode_first_over_st",
    }  # no serve rows (the server failed): those goals fail as "not measured"


def test_each_row_printed_and_the_exit_code(check, monkeypatch, tmp_path, capsys):
    """The steps faked: one measures, one fails, faiss is skipped; each row is printed with its
    verdict, a failed step fails its own rows only, and the run exits 1."""
    import torch

    monkeypatch.setattr(check, "cuda_problem", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "a GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    def failing(work):
        raise check.StepFailed("exit 1: error: the parity gate failed")

    def skipped(work):
        raise check.StepFailed("skipped: faiss here has no GPU support")

    steps = {
        "export": failing,
        "gpu": lambda work: {"encode_first_per_s": 150_000.0, "encode_first_of_ceiling": 0.5},
        "train_step": lambda work: {"micse_over_simcse": 1.2, "micse_step_ms": 14.0},
        "nproc": lambda work: {"nproc_ok": 1.0},
        "faiss": skipped,
        "train_1m": lambda work: {"train_1m_s": 1.0},
    }
    monkeypatch.setattr(check, "STEPS", steps)
    out = tmp_path / "check.json"
    argv = ["gpu_check.py", "--json", str(out), "--work", str(tmp_path / "w"), "--no-train-1m"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as ended:
        check.main()
    assert ended.value.code == 1
    printed = capsys.readouterr().out
    status = {r["key"]: r["status"] for r in json.loads(out.read_text())["rows"]}
    assert status == {
        "export_ok": "FAIL",
        "encode_first_per_s": "PASS",
        "encode_first_of_ceiling": "FAIL",  # 0.5 < 0.65
        "encode_first_over_st": "FAIL",  # not measured
        "serve_32x64_per_s": "FAIL",
        "serve_32x1_p99_ms": "FAIL",
        "serve_128x1_of_offline": "FAIL",
        "micse_over_simcse": "PASS",
        "micse_step_ms": "PASS",
        "nproc_ok": "PASS",
        "faiss_flat_x_cpu": "SKIP",
        "faiss_flat_recall": "SKIP",
        "faiss_index_same_top10": "SKIP",
        "train_1m_s": "SKIP",  # left out (--no-train-1m)
    }
    assert "the parity gate failed" in printed and "gpu-check on a GPU" in printed
    assert "6 of 14 rows failed" in printed
