"""Which optimization an export keeps: the fusions where they apply and keep the numbers, else the
basic graph optimizations; the summary and `embedkit.json` say which."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")

from embedkit.export import ParityFailure, ParityGates, export_model  # noqa: E402


def ops(path: Path) -> Counter:
    import onnx

    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def test_a_graph_nothing_fuses_in_gets_the_basic_optimizations(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    import embedkit.export.optimize as optimize

    def fuses_nothing(src: Path, dst: Path, **_: object) -> dict[str, int]:
        return {}

    monkeypatch.setattr(optimize, "fuse_graph", fuses_nothing)
    steps: list[str] = []
    result = export_model(tiny_bert, tmp_path / "onnx", int8=True, progress=False, on_step=steps.append)
    meta = result.metadata
    assert meta["optimization"]["plan"] == "basic" and meta["fusion"] == {}
    assert meta["optimization"]["applied"].startswith("onnxruntime basic graph optimizations")
    assert "optimization: onnxruntime basic graph optimizations" in " | ".join(steps)
    assert meta["int8"]["quantized_graph"] == "basic"
    graph = ops(result.out_dir / "model.onnx")
    assert "Attention" not in graph and "Softmax" in graph
    assert all(r.passed for r in result.reports)


def test_a_fusion_that_changes_the_vectors_is_refused_for_the_basic_graph(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    import onnx
    from onnx import numpy_helper

    import embedkit.export.optimize as optimize

    real_fuse = optimize.fuse_graph

    def fuses_wrongly(src: Path, dst: Path, **kwargs: object) -> dict[str, int]:
        fusion = real_fuse(src, dst, **kwargs)
        model = onnx.load(str(dst))
        for init in model.graph.initializer:  # as a faulty fusion would: the numbers change
            if init.data_type == onnx.TensorProto.FLOAT and len(init.dims) == 2:
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.5, init.name))
        onnx.save(model, str(dst))
        return fusion

    monkeypatch.setattr(optimize, "fuse_graph", fuses_wrongly)
    steps: list[str] = []
    result = export_model(tiny_bert, tmp_path / "onnx", progress=False, on_step=steps.append)
    meta = result.metadata
    assert meta["optimization"]["plan"] == "basic"
    [rejected] = meta["optimization"]["rejected"]
    assert rejected["plan"] == "fusions" and rejected["min_cosine"] < 0.99999
    assert any(s.startswith("fp32 (fusions) missed the gate") for s in steps)
    assert [r.precision for r in result.reports] == ["fp32"] and result.reports[0].passed
    assert "Attention" not in ops(result.out_dir / "model.onnx")


def test_when_every_plan_misses_the_gate_nothing_is_written(tmp_path: Path, tiny_bert: Path):
    with pytest.raises(ParityFailure, match="parity gate failed: fp32") as info:
        export_model(tiny_bert, tmp_path / "onnx", progress=False, gates=ParityGates(fp32_min_cosine=1.5))
    assert [r.precision for r in info.value.reports] == ["fp32"]
    assert not (tmp_path / "onnx").exists()


def test_the_cli_says_which_optimization_was_applied(tmp_path: Path, tiny_bert: Path):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    result = CliRunner().invoke(app, ["export", str(tiny_bert), "--out", str(tmp_path / "onnx")])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("optimization: "))
    assert "onnxruntime transformer fusions" in line and "4 Attention" in line
