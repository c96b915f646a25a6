"""`embedkit export` through the CLI: exit codes and what it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("onnxruntime")

from embedkit.cli.app import app  # noqa: E402

runner = CliRunner()


def test_export_succeeds_and_prints_figures(tmp_path: Path, tiny_bert_no_types: Path):
    out = tmp_path / "onnx"
    result = runner.invoke(app, ["export", str(tiny_bert_no_types), "--out", str(out), "--opset", "16"])
    assert result.exit_code == 0, result.output
    assert "Parity with PyTorch" in result.output and "fp32" in result.output
    assert "4 Attention" in result.output
    assert f"wrote {out}" in result.output
    assert (out / "model.onnx").is_file() and (out / "embedkit.json").is_file()


def test_failed_gate_exits_1_with_figures_and_no_output(
    tmp_path: Path, tiny_bert_no_types: Path, monkeypatch: pytest.MonkeyPatch
):
    import embedkit.export.pipeline as pipeline
    from embedkit.export.parity import ParityGates

    monkeypatch.setattr(pipeline, "ParityGates", lambda: ParityGates(fp32_min_cosine=1.5))
    out = tmp_path / "onnx"
    result = runner.invoke(app, ["export", str(tiny_bert_no_types), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "FAILED: nothing was written" in result.output and "FAIL" in result.output
    assert "error: parity gate failed: fp32: min cosine" in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/missing", "--out", "{tmp}/o"], "error: model folder not found"),
        (["{tmp}", "--out", "{tmp}/o"], "error: not a model folder"),
        (["{model}", "--out", "{tmp}/o", "--opset", "99"], "error: opset 99 is not supported"),
        (["{model}", "--out", "{tmp}/file.txt"], "is a file, not a folder"),
        (["{model}", "--out", "{tmp}/o", "--calibration", "{tmp}/none.txt"], "calibration file not found"),
    ],
)
def test_input_errors_exit_2(tmp_path: Path, tiny_bert_no_types: Path, args: list[str], message: str):
    (tmp_path / "file.txt").write_text("x")
    argv = ["export", *(a.format(tmp=tmp_path, model=tiny_bert_no_types) for a in args)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_command_module_is_light():
    code = (
        "import sys\n"
        "import embedkit.cli.export\n"
        "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'onnx') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    result = runner.invoke(app, ["export", "--help"])
    assert result.exit_code == 0 and "--int8" in result.output and "--no-optimize" in result.output
