"""The one interface of evaluators, as sentence-transformers' evaluators have it.

An evaluator is built with its data (read and checked at once, so bad input fails before any
model work) and called with an `Encoder`; it returns a flat `dict[str, float]` of named metrics
(`spearman_cosine`, `ndcg@10`, ...). `primary_metric` names the headline key and
`greater_is_better` its direction: `embedkit eval` prints them, `embedkit experiment` tabulates
them, and `embedkit train` selects checkpoints on the primary metric. Scales are the usual ones:
STS Spearman x 100 (as SimCSE and miCSE report it), ranking metrics in [0, 1] (as BEIR does).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from embedkit.encode.protocol import Encoder


@runtime_checkable
class Evaluator(Protocol):
    name: str  # what reports call it: "sts", "retrieval", "pseudo"
    primary_metric: str  # the key of the headline metric in the returned dict
    greater_is_better: bool

    def __call__(self, encoder: Encoder) -> dict[str, float]: ...

    def describe(self) -> dict[str, Any]: ...  # what was evaluated on, for metadata files


def primary_score(evaluator: Evaluator, metrics: dict[str, float]) -> float:
    """The primary metric, signed so that larger is always better (for selecting checkpoints)."""
    value = float(metrics[evaluator.primary_metric])
    return value if evaluator.greater_is_better else -value
