"""Metric math against hand-computed cases, scipy and (when installed) pytrec_eval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from embedkit.errors import InputError
from embedkit.evaluation import exact_search
from embedkit.evaluation.metrics import (
    evaluate_run,
    mrr_at_k,
    ndcg_at_k,
    parse_metric,
    rank_documents,
    rankdata,
    spearman,
)

# One query, graded judgments; z is judged irrelevant, x is unjudged.
QRELS = {"q1": {"a": 3, "b": 1, "c": 2, "z": 0}}
RUN = {"q1": {"a": 0.9, "x": 0.8, "c": 0.7, "b": 0.1, "z": 0.05}}  # ranking: a x c b z


def test_graded_ndcg_by_hand() -> None:
    dcg = 3 / math.log2(2) + 0 + 2 / math.log2(4) + 1 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    result = evaluate_run(RUN, QRELS, ("ndcg@10", "ndcg@2", "ndcg@1"))
    assert result.metrics["ndcg@10"] == pytest.approx(dcg / idcg)
    assert result.metrics["ndcg@2"] == pytest.approx(3 / (3 + 2 / math.log2(3)))
    assert result.metrics["ndcg@1"] == pytest.approx(1.0)


def test_ndcg_ideal_uses_all_judged_relevant_docs_even_unretrieved() -> None:
    # Only "b" (grade 1) is retrieved, at rank 1; the ideal ranks a(3), c(2), b(1).
    value = ndcg_at_k(["b"], QRELS["q1"], 10)
    assert value == pytest.approx(1 / (3 + 2 / math.log2(3) + 1 / math.log2(4)))


def test_mrr_recall_map_by_hand() -> None:
    result = evaluate_run(
        RUN, QRELS, ("mrr@10", "recall@1", "recall@2", "recall@10", "map@100", "map@2", "map@1")
    )
    m = result.metrics
    assert m["mrr@10"] == 1.0
    assert m["recall@1"] == pytest.approx(1 / 3)
    assert m["recall@2"] == pytest.approx(1 / 3)
    assert m["recall@10"] == 1.0
    # relevant at ranks 1, 3, 4: precisions 1, 2/3, 3/4, divided by all 3 relevant docs
    assert m["map@100"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    assert m["map@2"] == pytest.approx(1 / 3)
    assert m["map@1"] == pytest.approx(1 / 3)


def test_mrr_cutoff_and_first_relevant_rank() -> None:
    judgments = {"c": 1}
    assert mrr_at_k(["a", "b", "c"], judgments, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["a", "b", "c"], judgments, 2) == 0.0
    assert mrr_at_k(["a", "b", "c"], {"c": 0}, 10) == 0.0  # grade 0 is not relevant


def test_ties_rank_by_doc_id_descending() -> None:
    assert rank_documents({"d1": 0.5, "d2": 0.5, "d3": 0.5, "d0": 0.9}) == ["d0", "d3", "d2", "d1"]
    # string order, as trec_eval's strcmp: "9" > "10"
    assert rank_documents({"10": 1.0, "9": 1.0}) == ["9", "10"]
    result = evaluate_run({"q": {"d1": 0.5, "d2": 0.5, "d3": 0.5}}, {"q": {"d1": 1}}, ("mrr@10", "recall@1"))
    assert result.metrics == {"mrr@10": pytest.approx(1 / 3), "recall@1": 0.0}


def test_queries_without_relevant_docs_count_as_zero_and_unjudged_are_ignored() -> None:
    qrels = {"q1": QRELS["q1"], "q2": {"a": 0}}
    run = {**RUN, "q2": {"a": 1.0}, "q3": {"a": 1.0}}  # q3 has no judgments at all
    result = evaluate_run(run, qrels, ("ndcg@10", "mrr@10", "recall@10", "map@100"))
    assert set(result.per_query) == {"q1", "q2"}
    assert result.per_query["q2"] == {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@10": 0.0, "map@100": 0.0}
    assert result.metrics["recall@10"] == pytest.approx(0.5)
    assert result.metrics["mrr@10"] == pytest.approx(0.5)


def test_judged_query_missing_from_run_scores_zero() -> None:
    result = evaluate_run({}, {"q": {"a": 1}}, ("ndcg@10",))
    assert result.per_query == {"q": {"ndcg@10": 0.0}}


def test_bad_metric_names_and_empty_qrels() -> None:
    assert parse_metric("recall@100") == ("recall", 100)
    with pytest.raises(InputError, match="unknown metric 'precision@10'"):
        parse_metric("precision@10")
    with pytest.raises(InputError, match="unknown metric 'ndcg@0'"):
        parse_metric("ndcg@0")
    with pytest.raises(InputError, match="qrels are empty"):
        evaluate_run(RUN, {})


def _random_case(seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(40):
        qid = f"q{q}"
        judged = [f"d{i}" for i in rng.choice(60, int(rng.integers(1, 15)), replace=False)]
        qrels[qid] = {d: int(rng.integers(0, 4)) for d in judged}
        if q % 7 == 0:
            qrels[qid] = dict.fromkeys(judged, 0)
        # integer-valued scores: many ties, so the tie order matters
        run[qid] = {
            f"d{i}": float(rng.integers(0, 8))
            for i in rng.choice(60, int(rng.integers(5, 60)), replace=False)
        }
    return run, qrels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_pytrec_eval(seed: int) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _random_case(seed)
    measures = {"ndcg_cut.10", "recall.1,10,100", "map_cut.100", "recip_rank"}
    reference = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    ours = evaluate_run(run, qrels, ("ndcg@10", "recall@1", "recall@10", "recall@100", "map@100", "mrr@1000"))
    names = {
        "ndcg_cut_10": "ndcg@10",
        "recall_1": "recall@1",
        "recall_10": "recall@10",
        "recall_100": "recall@100",
        "map_cut_100": "map@100",
        "recip_rank": "mrr@1000",  # trec_eval's recip_rank has no cut-off; 1000 > any run here
    }
    assert set(reference) == set(ours.per_query)
    for query_id, values in reference.items():
        for theirs, mine in names.items():
            assert ours.per_query[query_id][mine] == pytest.approx(values[theirs], abs=1e-12), (
                query_id,
                mine,
            )


def test_rankdata_and_spearman_match_scipy_with_ties() -> None:
    gold = np.array([0.0, 1.0, 1.0, 2.5, 2.5, 2.5, 4.0, 5.0, 5.0, 3.2])
    predicted = np.array([0.1, 0.3, 0.3, 0.2, 0.9, 0.9, 0.5, 0.5, 0.8, 0.7])
    assert np.array_equal(rankdata(gold), scipy.stats.rankdata(gold))
    assert spearman(predicted, gold) == pytest.approx(
        scipy.stats.spearmanr(predicted, gold).statistic, abs=1e-12
    )
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 5, 50).astype(float)
        y = rng.integers(0, 4, 50) + rng.random(50) * 0.5
        assert spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y).statistic, abs=1e-12)


def test_spearman_edge_cases() -> None:
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))  # constant input, as scipy
    with pytest.raises(InputError, match="equally long"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(InputError, match="at least 2 pairs"):
        spearman([1], [1])


def test_exact_search_matches_brute_force_with_ties_and_excluded_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    import embedkit.search.exact as exact

    # tiny blocks so the running top-k merges across many chunks
    monkeypatch.setattr(exact, "SEARCH_CHUNK", 7)
    monkeypatch.setattr(exact, "QUERY_BLOCK", 3)
    rng = np.random.default_rng(0)
    docs = rng.integers(-2, 3, (50, 3)).astype(np.float32)  # small integers: many equal scores
    queries = rng.integers(-2, 3, (8, 3)).astype(np.float32)
    doc_ids = [str(i) for i in rng.choice(1000, 50, replace=False)]
    query_ids = [f"q{i}" for i in range(8)]
    exclude = [doc_ids[i] if i % 2 else "none" for i in range(8)]
    run = exact_search(queries, docs, doc_ids, 10, query_ids, exclude)
    for i, query_id in enumerate(query_ids):
        scored = [(float(queries[i] @ docs[j]), doc_ids[j]) for j in range(50) if doc_ids[j] != exclude[i]]
        expected = sorted(scored, reverse=True)[:10]  # score, then id, both descending
        got = sorted(((s, d) for d, s in run[query_id].items()), reverse=True)
        assert got == expected
