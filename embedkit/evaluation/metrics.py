"""Evaluation metrics on plain data: arrays for correlation, dicts for ranking. numpy only.

Correlation (STS) follows SentEval's "all" setting used by SimCSE and miCSE: one Spearman
correlation over every pair of a file. Ranking metrics follow trec_eval, as BEIR computes them
through pytrec_eval:

- a run is `{query_id: {doc_id: score}}`, qrels are `{query_id: {doc_id: grade}}` (integer grades;
  a document counts as relevant when its grade is > 0);
- each query's documents are ranked by score, descending, and ties are broken by document id,
  descending (trec_eval's `comp_sim_docno`), so a run always ranks the same way;
- only queries present in the qrels are evaluated (pytrec_eval's behaviour); a query whose
  judgments hold no relevant document scores 0 on every metric and still counts in the mean,
  as it does in BEIR; a judged query missing from the run also scores 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from embedkit.errors import InputError

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]
ArrayLike = Sequence[float] | np.ndarray

# The retrieval metrics `embedkit eval retrieval` reports, in table order.
RETRIEVAL_METRICS = ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100", "map@100")


def rankdata(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (scipy.stats.rankdata's "average")."""
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # Each run of equal values gets the mean of the ranks it spans.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    average = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat(average, ends - starts)
    return ranks


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson correlation of two equally long vectors; NaN when either is constant (as scipy)."""
    a, b = _paired_vectors(x, y)
    a = a - a.mean()
    b = b - b.mean()
    denominator = math.sqrt(float(a @ a) * float(b @ b))
    if denominator == 0.0:
        return float("nan")
    return float(np.clip((a @ b) / denominator, -1.0, 1.0))


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rank correlation in [-1, 1], ties at their average rank (scipy.stats.spearmanr).

    NaN when either input is constant, as scipy returns; `InputError` for unequal lengths, fewer
    than two values, or a NaN among the values.
    """
    a, b = _paired_vectors(x, y)
    return pearson(rankdata(a), rankdata(b))


def _paired_vectors(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise InputError(f"correlation needs two equally long vectors, got {a.size} and {b.size} values")
    if a.size < 2:
        raise InputError(f"correlation needs at least 2 pairs, got {a.size}")
    if np.isnan(a).any() or np.isnan(b).any():
        raise InputError("correlation input holds NaN")
    return a, b


def rank_documents(doc_scores: Mapping[str, float]) -> list[str]:
    """Document ids by score descending, ties by id descending (trec_eval's order)."""
    return [doc for doc, _ in sorted(doc_scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def dcg(gains: Iterable[float]) -> float:
    """Discounted cumulative gain, gain / log2(rank + 1) with ranks from 1 (Jarvelin & Kekalainen 2002)."""
    return sum(gain / math.log2(rank + 2) for rank, gain in enumerate(gains) if gain)


def ndcg_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """nDCG@k as trec_eval's ndcg_cut: linear gain = grade; the ideal ranks every judged doc by grade."""
    gains = [max(judgments.get(doc, 0), 0) for doc in ranking[:k]]
    ideal = sorted((grade for grade in judgments.values() if grade > 0), reverse=True)[:k]
    ideal_dcg = dcg(ideal)
    return dcg(gains) / ideal_dcg if ideal_dcg > 0 else 0.0


def mrr_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant (grade > 0) document in the top k; 0 if none."""
    for rank, doc in enumerate(ranking[:k], start=1):
        if judgments.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def recall_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top k over all relevant documents (trec_eval's recall_k)."""
    relevant = sum(1 for grade in judgments.values() if grade > 0)
    if relevant == 0:
        return 0.0
    return sum(1 for doc in ranking[:k] if judgments.get(doc, 0) > 0) / relevant


def average_precision_at_k(ranking: Sequence[str], judgments: Mapping[str, int], k: int) -> float:
    """trec_eval's map_cut: precision at each relevant hit in the top k, over all relevant documents."""
    relevant = sum(1 for grade in judgments.values() if grade > 0)
    if relevant == 0:
        return 0.0
    hits = 0
    total = 0.0
    for rank, doc in enumerate(ranking[:k], start=1):
        if judgments.get(doc, 0) > 0:
            hits += 1
            total += hits / rank
    return total / relevant


_METRIC_FUNCTIONS = {
    "ndcg": ndcg_at_k,
    "mrr": mrr_at_k,
    "recall": recall_at_k,
    "map": average_precision_at_k,
}


def parse_metric(name: str) -> tuple[str, int]:
    """`"ndcg@10"` -> `("ndcg", 10)`; `InputError` for an unknown name or a bad cut-off."""
    base, _, cutoff = name.partition("@")
    if base not in _METRIC_FUNCTIONS or not cutoff.isdigit() or int(cutoff) < 1:
        known = ", ".join(f"{m}@K" for m in _METRIC_FUNCTIONS)
        raise InputError(f"unknown metric {name!r}: use one of {known}")
    return base, int(cutoff)


@dataclass(frozen=True)
class RankingResult:
    """Mean metrics over the evaluated queries and each query's own values."""

    metrics: dict[str, float]  # metric name -> mean over `per_query`
    per_query: dict[str, dict[str, float]]  # query id -> metric name -> value


def evaluate_run(run: Run, qrels: Qrels, metrics: Sequence[str] = RETRIEVAL_METRICS) -> RankingResult:
    """Score a run against graded judgments, query by query, then average.

    Every query in `qrels` is evaluated (in the order of `qrels`); run entries for unjudged
    queries are ignored, as pytrec_eval ignores them.
    """
    parsed = [(name, *parse_metric(name)) for name in metrics]
    if not qrels:
        raise InputError("no judged queries to evaluate: the qrels are empty")
    if not any(grade > 0 for judgments in qrels.values() for grade in judgments.values()):
        raise InputError(
            "no query in the qrels has a relevant document (a grade above 0): every metric would be 0"
        )
    per_query: dict[str, dict[str, float]] = {}
    for query_id, judgments in qrels.items():
        ranking = rank_documents(run.get(query_id, {}))
        per_query[query_id] = {
            name: _METRIC_FUNCTIONS[base](ranking, judgments, k) for name, base, k in parsed
        }
    means = {name: float(np.mean([values[name] for values in per_query.values()])) for name, _, _ in parsed}
    return RankingResult(metrics=means, per_query=per_query)
