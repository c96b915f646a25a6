"""`embedkit train`: a light --help, one-line errors with exit 2 that write nothing, a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from embedkit.cli.app import app

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = "\n".join(" ".join(["wing flow"] * n) + f" {n}" for n in range(1, 13)) + "\n"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from embedkit.cli.app import app\n"
        "commands = (['--help'], ['train', '--help'], ['adapt', '--help'])\n"
        "codes = [CliRunner().invoke(app, args).exit_code for args in commands]\n"
        "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'faiss') if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"codes": [0, 0, 0], "heavy": []}


def bad_inputs(tmp_path: Path, tiny_bert: Path) -> dict[str, tuple[list[str], str]]:
    (tmp_path / "empty.txt").write_text("\n   \n\n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (tmp_path / "ok.txt").write_text(CORPUS)
    (tmp_path / "not-a-model").mkdir()
    base = ["--base", str(tiny_bert)]
    return {
        "missing file": ([str(tmp_path / "nope.txt"), *base], "corpus not found"),
        "empty corpus": ([str(tmp_path / "empty.txt"), *base], "no sentences in"),
        "non-UTF-8": ([str(tmp_path / "latin1.txt"), *base], r"line 1 is not valid UTF-8"),
        "base not a model": (
            [str(tmp_path / "ok.txt"), "--base", str(tmp_path / "not-a-model")],
            "not a model folder",
        ),
        "unknown method": (
            [str(tmp_path / "ok.txt"), *base, "--method", "bert-flow"],
            "unknown method 'bert-flow'",
        ),
        "bad --set": ([str(tmp_path / "ok.txt"), *base, "--set", "temperature=warm"], "temperature='warm'"),
        "cuda without a GPU": (
            [str(tmp_path / "ok.txt"), *base, "--device", "cuda"],
            "torch sees no CUDA GPU",
        ),
        "nothing to resume": (
            [str(tmp_path / "ok.txt"), *base, "--resume"],
            r"nothing to resume in .*out: it holds no checkpoint",
        ),
        "matryoshka not sizes": (
            [str(tmp_path / "ok.txt"), *base, "--matryoshka", "32,x"],
            r"matryoshka_dims='32,x' is not a valid comma-separated list of ints",
        ),
        "matryoshka above the model": (
            [str(tmp_path / "ok.txt"), *base, "--matryoshka", "64,32,16"],
            r"matryoshka_dims 64: larger than the base model's 32 dimensions",
        ),
        "matryoshka without the model's size": (
            [str(tmp_path / "ok.txt"), *base, "--matryoshka", "16,8"],
            r"matryoshka_dims must include 32, the base model's dimension",
        ),
        "matryoshka weights mismatch": (
            [str(tmp_path / "ok.txt"), *base, "--matryoshka", "32,16", "--matryoshka-weights", "1,1,1"],
            r"one weight per size of matryoshka_dims \(2\), got 3",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing file",
        "empty corpus",
        "non-UTF-8",
        "base not a model",
        "unknown method",
        "bad --set",
        "cuda without a GPU",
        "nothing to resume",
        "matryoshka not sizes",
        "matryoshka above the model",
        "matryoshka without the model's size",
        "matryoshka weights mismatch",
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, tiny_bert: Path, case: str
) -> None:
    if case == "cuda without a GPU" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args, message = bad_inputs(tmp_path, tiny_bert)[case]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["train", *args, "--out", str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert pytest.importorskip("re").search(message, lines[0])
    assert not out.exists()


def test_a_short_run_writes_a_model(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    out = tmp_path / "out"
    args = ["train", str(corpus), "--out", str(out), "--base", str(tiny_bert), "--method", "simcse"]
    args += ["--max-steps", "2", "--batch-size", "4", "--seed", "7", "--set", "warmup_ratio=0", "--quiet"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"saved {out} (simcse, 2 steps on 12 sentences)" in " ".join(result.stdout.split())
    meta = json.loads((out / "embedkit.json").read_text())
    config = meta["training"]["config"]
    assert (config["seed"], config["limit_seed"], config["warmup_ratio"], config["max_steps"]) == (
        7,
        7,
        0.0,
        2,
    )

    again = CliRunner().invoke(app, args)  # a finished model is not overwritten silently
    assert again.exit_code == 2 and "pass --overwrite" in again.stderr


def test_matryoshka_run_records_its_sizes(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    out = tmp_path / "out"
    args = ["train", str(corpus), "--out", str(out), "--base", str(tiny_bert), "--method", "simcse"]
    args += ["--max-steps", "2", "--batch-size", "4", "--quiet"]
    args += ["--matryoshka", "8,32,16", "--matryoshka-weights", "0.5,1,2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "embedkit.json").read_text())
    assert meta["matryoshka_dims"] == [32, 16, 8]
    config = meta["training"]["config"]
    assert (config["matryoshka_dims"], config["matryoshka_weights"]) == ([8, 32, 16], [0.5, 1.0, 2.0])


def test_worse_than_base_is_said_plainly(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import embedkit.training.trainer as trainer
    from embedkit.data.corpus import CorpusStats

    def fake_train(corpus, out, config, **kwargs):
        stats = CorpusStats(12, 0, 12, 0, 12)
        return trainer.TrainResult(
            Path(out), config.method, 16, 12, stats, 0.70, 16, 0.80, {"loss": 1.0}, 1.0, "dev Spearman"
        )

    monkeypatch.setattr(trainer, "train", fake_train)
    result = CliRunner().invoke(app, ["train", str(corpus), "--out", str(tmp_path / "o"), "--quiet"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "dev Spearman: 0.7000 at step 16 (untrained base: 0.8000)" in text
    assert "WORSE than the untrained base model" in text


# --- several processes: `--nproc N` runs torchrun --------------------------------------------------------


def test_nproc_hands_each_rank_the_same_command_line(
    tmp_path: Path, corpus: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import embedkit.training.launch as launch

    seen: list[tuple[int, list[str]]] = []
    monkeypatch.setattr(launch, "launch", lambda nproc, argv: seen.append((nproc, argv)))
    out = tmp_path / "out"
    args = [str(corpus), "--out", str(out), "--base", str(tiny_bert), "--batch-size", "4", "--lr", "0.001"]
    args += ["--set", "warmup_ratio=0", "--set", "queue_size=8", "--split-sentences", "--quiet"]
    result = CliRunner().invoke(app, ["train", *args, "--nproc", "2"])
    assert result.exit_code == 0, result.output
    ((nproc, argv),) = seen
    assert nproc == 2
    # what the ranks get parses to the same settings, without --nproc
    assert argv[0] == str(corpus) and "--nproc" not in argv
    for flag, value in [
        ("--out", str(out)),
        ("--base", str(tiny_bert)),
        ("--batch-size", "4"),
        ("--lr", "0.001"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--set"] == ["warmup_ratio=0", "queue_size=8"]
    assert "--split-sentences" in argv and "--quiet" in argv and "--overwrite" not in argv


def test_nproc_checks_the_batch_and_torchrun(
    tmp_path: Path, corpus: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["train", str(corpus), "--out", str(tmp_path / "out"), "--base", str(tiny_bert), "--quiet"]
    result = CliRunner().invoke(app, [*base, "--batch-size", "6", "--nproc", "4"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --batch-size 6 does not divide by --nproc 4: each process takes an equal slice of every batch"
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    result = CliRunner().invoke(app, [*base, "--nproc", "2"])
    assert result.exit_code == 2 and "leave it out under torchrun" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_failed_launch_is_explained_by_its_cause() -> None:
    from embedkit.errors import InputError, RunFailure
    from embedkit.training.launch import launch_failure

    lost = {"message": "rank 0 lost contact with the other ranks (...)", "exit_code": 1, "lost_contact": True}
    bad = {"message": "corpus not found: x.txt", "exit_code": 2, "lost_contact": False}
    nan = {"message": "the loss became nan at step 3", "exit_code": 1, "lost_contact": False}
    # a rank's own error beats the others' lost contact, and keeps its kind
    error = launch_failure({0: 1, 1: 2}, {0: lost, 1: bad})
    assert isinstance(error, InputError) and str(error) == "rank 1: corpus not found: x.txt"
    error = launch_failure({0: 1}, {0: nan})
    assert type(error) is RunFailure and str(error) == "the loss became nan at step 3"
    # a killed rank beats the survivors' lost contact and the ranks torchrun stopped (SIGTERM)
    error = launch_failure({0: 1, 1: -9, 2: -15}, {0: lost})
    assert str(error).startswith("rank 1 was killed (SIGKILL) and the others were stopped;")
    assert "--resume continues" in str(error)
    # a rank that crashed with a traceback (no message of ours) beats lost contact
    assert str(launch_failure({0: 1, 1: 1}, {0: lost})).startswith("rank 1 failed (exit code 1")
    assert str(launch_failure({1: 1}, {0: lost, 1: lost})) == lost["message"]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ranks through /proc")
def test_a_killed_rank_ends_the_launch_with_one_line(tmp_path: Path, corpus: Path, still_bert: Path) -> None:
    import os
    import signal
    import time

    from embedkit.training import checkpoint as ckpt

    out = tmp_path / "out"
    command = [sys.executable, "-m", "embedkit.cli", "train", str(corpus), "--out", str(out)]
    command += ["--base", str(still_bert), "--method", "simcse", "--batch-size", "4", "--epochs", "1000"]
    command += ["--max-steps", "0", "--save-steps", "2", "--device", "cpu", "--quiet", "--nproc", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not list((out / "checkpoints").glob("step-*")):  # running, with a checkpoint to resume
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        ranks = [
            p
            for p in _children(launcher.pid)
            if b"RANK=1" in Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        ]
        assert len(ranks) == 1
        os.kill(ranks[0], signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=60)  # no hang
    finally:
        launcher.kill()
    assert launcher.returncode == 1
    assert stderr.strip().splitlines() == [
        "error: rank 1 was killed (SIGKILL) and the others were stopped; the last checkpoint stays, "
        "and --resume continues from it"
    ]
    assert ckpt.latest_checkpoint(out) is not None


@pytest.mark.slow
def test_nproc_trains_the_model_one_process_trains(tmp_path: Path, corpus: Path, still_bert: Path) -> None:
    """The whole CLI path: launcher, torchrun, `python -m embedkit.cli train` on each rank."""
    import os

    from safetensors.torch import load_file

    args = ["train", str(corpus), "--base", str(still_bert), "--method", "micse", "--batch-size", "4"]
    args += ["--max-steps", "3", "--lr", "1e-4", "--set", "momentum_dropout=0", "--device", "cpu", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "embedkit.cli", *args, "--out", str(tmp_path / "two"), "--nproc", "2"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=150)
    assert done.returncode == 0, done.stderr
    assert "saved" in done.stdout and done.stderr.strip() == ""
    one = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    expected = load_file(tmp_path / "one" / "model.safetensors")
    for name, tensor in load_file(tmp_path / "two" / "model.safetensors").items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-5)
