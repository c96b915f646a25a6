"""benchmarks/calibration.py's judged column is what `eval retrieval --mode M --fusion F --alpha A`
measures, BEIR's identical ids left out."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_data import HashEncoder, write_beir

from embedkit.data.beir import read_beir
from embedkit.data.document import Document
from embedkit.evaluation.fusion_candidates import candidate_requests
from embedkit.evaluation.retrieval import RetrievalEvaluator

pytest.importorskip("tantivy")


def test_the_judged_column_is_the_evaluators(load_benchmark, tmp_path: Path) -> None:
    calibration = load_benchmark("calibration")
    folder = write_beir(tmp_path / "beir")  # query "3" judges document "3": left out, as BEIR does
    encoder = HashEncoder()
    corpus = read_beir(folder, "test").corpus
    documents = [Document(i, d["text"], d["title"]) for i, d in corpus.items()]
    vectors = encoder.encode([d.full_text for d in documents], normalize=True)
    judged = calibration.judged(encoder, folder, documents, vectors)
    for name, request in candidate_requests().items():
        fusion, alpha = (request.fusion, request.alpha) if request.mode == "hybrid" else (None, None)
        evaluator = RetrievalEvaluator(
            folder, mode=request.mode, fusion=fusion, alpha=alpha, metrics=["ndcg@10"]
        )
        assert judged[name] == round(100 * evaluator.evaluate(encoder).metrics["ndcg@10"], 2), name
