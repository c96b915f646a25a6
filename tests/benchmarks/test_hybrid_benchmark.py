"""benchmarks/hybrid.py measures what `eval retrieval` and the STS retrieval protocol measure: each of
its rankings against the evaluator's on a tiny BEIR folder (BEIR's identical ids included) and its
dense STS row against `evaluate_sts_retrieval`."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_data import HashEncoder, write_beir, write_sts

from embedkit.evaluation.retrieval import RetrievalEvaluator
from embedkit.evaluation.sts_retrieval import evaluate_sts_retrieval

pytest.importorskip("tantivy")


def test_every_beir_ranking_is_the_evaluators(load_benchmark, tmp_path: Path) -> None:
    hybrid = load_benchmark("hybrid")
    folder = write_beir(tmp_path / "beir")  # query "3" judges document "3": left out, as BEIR does
    encoder = HashEncoder()
    rows = {row.pop("ranking"): row for row in hybrid.beir(encoder, folder, 100, None)}
    assert set(rows) == {*hybrid.requests(100), hybrid.REFUSED}
    for label, request in hybrid.requests(100).items():
        evaluator = RetrievalEvaluator(
            folder, mode=request.mode, fusion=request.fusion, alpha=request.alpha, metrics=hybrid.METRICS
        )
        assert rows[label] == pytest.approx(evaluator.evaluate(encoder).metrics, abs=1e-9), label


@pytest.mark.parametrize("exclude", ["row", "text"])
def test_the_dense_sts_row_is_the_protocols(load_benchmark, tmp_path: Path, exclude: str) -> None:
    hybrid = load_benchmark("hybrid")
    path = write_sts(tmp_path / "sts.tsv")  # its second sentences repeat first ones: copies of texts
    encoder = HashEncoder()
    rows = {row.pop("ranking"): row for row in hybrid.sts_b(encoder, path, 100, None, exclude)}
    assert rows["dense"] == pytest.approx(evaluate_sts_retrieval(encoder, path, exclude=exclude))


def test_sentence_ids_share_a_text_only_where_the_text_is_left_out(load_benchmark) -> None:
    hybrid = load_benchmark("hybrid")
    sentences = ["a", "b", "a", "c", "b"] * 3
    by_row = hybrid.sentence_ids(sentences, "row")
    assert len(set(by_row)) == 15 and by_row == sorted(by_row, reverse=True)  # ties to the lower row
    by_text = hybrid.sentence_ids(sentences, "text")
    assert by_text[:5] == [by_row[0], by_row[1], by_row[0], by_row[3], by_row[1]]
