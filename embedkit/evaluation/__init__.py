"""Scoring encoders: metric math on plain data, and evaluators that run an encoder over a data set.

`metrics` (Spearman, nDCG, MRR, recall, MAP) takes plain dicts and arrays. `evaluator` is the one
interface every evaluator follows; `sts`, `retrieval` and `pseudo_queries` implement it, searching
with `exact_search` (numpy) or an index folder.
"""

from embedkit.evaluation.evaluator import Evaluator
from embedkit.evaluation.pseudo_queries import PseudoQueryEvaluator, build_pseudo_queries, evaluate_pseudo
from embedkit.evaluation.retrieval import RetrievalEvaluator, RetrievalReport, evaluate_retrieval
from embedkit.evaluation.runs import exact_search, index_search
from embedkit.evaluation.sts import STS_METRIC, StsEvaluator, evaluate_sts

__all__ = [
    "STS_METRIC",
    "Evaluator",
    "PseudoQueryEvaluator",
    "RetrievalEvaluator",
    "RetrievalReport",
    "StsEvaluator",
    "build_pseudo_queries",
    "evaluate_pseudo",
    "evaluate_retrieval",
    "evaluate_sts",
    "exact_search",
    "index_search",
]
