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
        "codes = [CliRunner().invoke(app, args).exit_code for args in (['--help'], ['train', '--help'])]\n"
        "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'faiss') if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"codes": [0, 0], "heavy": []}


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
