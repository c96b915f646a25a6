"""The published all-MiniLM-L6-v2 figures, reproduced on the shared data (slow: the real model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app

STSB_TEST_SPEARMAN = 82.03  # all-MiniLM-L6-v2, mean pooling, STS-B test, Spearman x 100 of cosine
CRANFIELD_NDCG10 = 0.506  # the same model on Cranfield (BEIR layout), graded nDCG@10


@pytest.mark.slow
def test_stsb_test_spearman(minilm: Path, shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "sts.json"
    args = [
        "eval",
        "sts",
        str(shared_data / "sts" / "stsb-test.tsv"),
        "--model",
        str(minilm),
        "--json",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = json.loads(out.read_text())
    assert written["files"][0]["pairs"] == 1379
    assert written["metrics"]["spearman_cosine"] == pytest.approx(STSB_TEST_SPEARMAN, abs=0.01)


@pytest.mark.slow
def test_cranfield_ndcg_at_10(minilm: Path, shared_data: Path) -> None:
    from embedkit.encode.loading import load_encoder
    from embedkit.evaluation import RetrievalEvaluator

    report = RetrievalEvaluator(shared_data / "cranfield", mode="dense").evaluate(load_encoder(minilm))
    assert (report.queries, report.documents) == (225, 1400)
    assert report.metrics["ndcg@10"] == pytest.approx(CRANFIELD_NDCG10, abs=0.001)
