"""`evaluate_modes` (what `eval retrieval` runs) gives each mode the report a `RetrievalEvaluator`
of that mode gives alone, with one model and one embedding of the corpus for all of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_data import write_beir

from embedkit import build_index, load_encoder
from embedkit.errors import InputError
from embedkit.evaluation import RetrievalEvaluator, evaluate_modes
from embedkit.jobs.index_options import IndexOptions


@pytest.mark.parametrize("with_index", [False, True])
def test_each_mode_is_its_evaluator_alone(tiny_onnx: Path, tmp_path: Path, with_index: bool) -> None:
    folder = write_beir(tmp_path / "beir")
    index = None
    if with_index:
        index = tmp_path / "index"
        build_index(folder / "corpus.jsonl", index, tiny_onnx, IndexOptions(kind="flat", device="cpu"))
    modes = ["dense", "lexical", "hybrid", None]
    evaluated = evaluate_modes(folder, modes, index=index, model=tiny_onnx)
    encoder = load_encoder(tiny_onnx, device="cpu")
    alone = {}
    for mode in modes:
        report = RetrievalEvaluator(folder, index=index, mode=mode).evaluate(encoder)
        alone[report.mode] = report
    assert list(evaluated.reports) == ["dense", "lexical", "hybrid"]  # None ran what search runs: hybrid
    for mode, report in evaluated.reports.items():
        assert report.metrics == alone[mode].metrics, mode
        assert report.run == alone[mode].run, mode
    assert evaluated.encoder.path == encoder.path


def test_a_bad_index_folder_fails_before_a_model_loads(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    with pytest.raises(InputError, match="no-index"):
        evaluate_modes(folder, ["dense"], index=tmp_path / "no-index", model=tmp_path / "no-model")
