"""StsEvaluator and RetrievalEvaluator with a tiny random model, against brute-force references."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from eval_data import DOCS, QRELS, QUERIES, HashEncoder, write_beir, write_sts

from embedkit.errors import InputError
from embedkit.evaluation import RetrievalEvaluator, StsEvaluator, evaluate_retrieval, evaluate_sts
from embedkit.evaluation.metrics import RETRIEVAL_METRICS
from embedkit.jobs.index_options import IndexOptions


@pytest.fixture(scope="module")
def encoder(tiny_bert: Path):
    from embedkit.encode.torch_backend import TorchEncoder

    return TorchEncoder(tiny_bert, device="cpu")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_sts_matches_scipy_on_cosine(encoder, tmp_path: Path) -> None:
    path = write_sts(tmp_path / "tiny.tsv")
    lines = [line.split("\t") for line in path.read_text().splitlines()[1:]]
    cosine = [
        _cosine(encoder.encode(a, normalize=False), encoder.encode(b, normalize=False)) for a, b, _ in lines
    ]
    expected = 100 * scipy.stats.spearmanr(cosine, [float(s) for _, _, s in lines]).statistic
    evaluator = StsEvaluator(path)
    assert evaluator.primary_metric == "spearman_cosine"
    scores = evaluator(encoder)
    assert scores == {
        "tiny/spearman_cosine": pytest.approx(expected, abs=1e-4),
        "spearman_cosine": pytest.approx(expected, abs=1e-4),
    }
    assert evaluate_sts(encoder, [path]) == scores


def test_sts_mean_over_files_and_clashing_names(encoder, tmp_path: Path) -> None:
    first = write_sts(tmp_path / "tiny.tsv")
    (tmp_path / "other").mkdir()
    second = tmp_path / "other" / "tiny.tsv"
    # the same pairs with the gold scores reversed: the correlation flips sign
    rows = first.read_text().splitlines()
    flipped = [rows[0]] + [f"{a}\t{b}\t{5 - float(s)}" for a, b, s in (r.split("\t") for r in rows[1:])]
    second.write_text("\n".join(flipped) + "\n")
    scores = StsEvaluator([first, second])(encoder)
    assert set(scores) == {f"{first}/spearman_cosine", f"{second}/spearman_cosine", "spearman_cosine"}
    assert scores[f"{second}/spearman_cosine"] == pytest.approx(-scores[f"{first}/spearman_cosine"], abs=1e-9)
    assert scores["spearman_cosine"] == pytest.approx(0.0, abs=1e-9)


def _reference_run(encoder, ignore_identical: bool) -> dict[str, dict[str, float]]:
    """Cosine of every query with every document, top 100 by (score, id) descending."""
    texts = [f"{'doc' if i % 2 else ''} {d}".strip() for i, d in enumerate(DOCS)]
    docs = [encoder.encode(t, normalize=False) for t in texts]
    run = {}
    for qid, query in QUERIES.items():
        q = encoder.encode(query, normalize=False)
        scored = [
            (_cosine(q, v), str(i)) for i, v in enumerate(docs) if not (ignore_identical and str(i) == qid)
        ]
        run[qid] = {doc: score for score, doc in sorted(scored, reverse=True)[:100]}
    return run


def _ndcg10(run: dict[str, float], judged: dict[str, int]) -> float:
    ranking = [d for d, _ in sorted(run.items(), key=lambda x: (x[1], x[0]), reverse=True)][:10]
    dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


@pytest.mark.parametrize("ignore_identical", [True, False])
def test_retrieval_matches_brute_force(tmp_path: Path, ignore_identical: bool) -> None:
    encoder = HashEncoder()
    evaluator = RetrievalEvaluator(
        write_beir(tmp_path / "beir"), ignore_identical_ids=ignore_identical, mode="dense"
    )
    report = evaluator.evaluate(encoder)
    assert evaluator.primary_metric == "ndcg@10"
    assert tuple(report.metrics) == RETRIEVAL_METRICS
    assert (report.queries, report.documents, report.search) == (4, 12, "exact")
    assert list(report.per_query) == list(QRELS)  # the unjudged query is not evaluated
    run = _reference_run(encoder, ignore_identical)
    for qid, judged in QRELS.items():
        assert report.per_query[qid]["ndcg@10"] == pytest.approx(_ndcg10(run[qid], judged), abs=1e-6)
    # with 12 documents every relevant one is in the top 100, except query "3"'s own doc when dropped
    assert report.per_query["3"]["recall@100"] == (0.5 if ignore_identical else 1.0)
    assert report.per_query["q4"] == dict.fromkeys(RETRIEVAL_METRICS, 0.0)
    expected = np.mean([_ndcg10(run[q], j) for q, j in QRELS.items()])
    assert report.metrics["ndcg@10"] == pytest.approx(expected, abs=1e-6)


def test_evaluate_retrieval_function_and_bad_split(encoder, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    dense = RetrievalEvaluator(folder, mode="dense")
    assert evaluate_retrieval(encoder, folder, mode="dense") == dense(encoder)
    with pytest.raises(InputError, match=r"has no qrels/dev.tsv"):
        RetrievalEvaluator(folder, split="dev")
    with pytest.raises(InputError, match=r"no STS files given"):
        StsEvaluator([])


def test_retrieval_through_a_flat_index_matches_exact_search(tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    encoder = HashEncoder()
    from embedkit import SearchIndex, build_index

    folder = write_beir(tmp_path / "beir")
    build_index(folder, tmp_path / "index", encoder, IndexOptions(kind="flat"))
    exact = RetrievalEvaluator(folder, mode="dense").evaluate(encoder)
    by_folder = RetrievalEvaluator(folder, index=tmp_path / "index", mode="dense").evaluate(encoder)
    with SearchIndex.load(tmp_path / "index") as index:
        by_object = RetrievalEvaluator(folder, index=index, mode="dense").evaluate(encoder)
    for report in (by_folder, by_object):
        assert report.search == str(tmp_path / "index")
        assert report.metrics == pytest.approx(exact.metrics, abs=1e-6)
