"""Scoring encoders: metric math on plain data, and evaluators that run an encoder over a data set.

`metrics` (Spearman, nDCG, MRR, recall, MAP) takes plain dicts and arrays. `evaluator` is the one
interface every evaluator follows; `sts`, `retrieval` and `pseudo_queries` implement it (`retrieval_modes`:
several search modes side by side, as `eval retrieval` runs them), searching
through the search pipeline (`embedkit.search`) over an index or a corpus held in memory
(`memory_store`, whose `exact_search` is exact numpy search). `fusion_calibration` chooses an
index's fusion on pseudo queries (`pseudo_kinds`), each candidate scored by `fusion_candidates`, by
the rule of `fusion_rule`.
"""

from embedkit.evaluation.evaluator import Evaluator
from embedkit.evaluation.memory_store import exact_search
from embedkit.evaluation.pseudo_queries import PseudoQueryEvaluator, build_pseudo_queries, evaluate_pseudo
from embedkit.evaluation.retrieval import RetrievalEvaluator, RetrievalReport, evaluate_retrieval
from embedkit.evaluation.retrieval_modes import ModesEvaluated, evaluate_modes
from embedkit.evaluation.runs import index_search
from embedkit.evaluation.sts import STS_METRIC, StsEvaluator, evaluate_sts

__all__ = [
    "STS_METRIC",
    "Evaluator",
    "ModesEvaluated",
    "PseudoQueryEvaluator",
    "RetrievalEvaluator",
    "RetrievalReport",
    "StsEvaluator",
    "build_pseudo_queries",
    "evaluate_modes",
    "evaluate_pseudo",
    "evaluate_retrieval",
    "evaluate_sts",
    "exact_search",
    "index_search",
]
