"""`plot_modes` and `eval retrieval --plot`: nDCG@10 per mode as bars, written as a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app

pytest.importorskip("matplotlib")


def test_plot_modes_writes_a_png(tmp_path: Path) -> None:
    from embedkit.report.plots import plot_modes

    scores = {"cranfield": {"dense": 0.5, "lexical": 0.52, "hybrid": 0.55}, "msmarco": {"dense": 0.8}}
    path = plot_modes(scores, "ndcg@10", tmp_path / "modes.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_retrieval_plot_writes_the_png(tmp_path: Path, tiny_bert: Path) -> None:
    from eval_data import write_beir

    folder = write_beir(tmp_path / "beir")
    png = tmp_path / "modes.png"
    args = ["eval", "retrieval", str(folder), "--model", str(tiny_bert), "--mode", "all", "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in result.stdout
