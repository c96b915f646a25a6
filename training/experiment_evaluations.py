"""Every evaluation of a low-shot experiment (`experiment`), built once: the files are read and
checked before the first run trains, and each run's model is scored on all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embedkit.encode.caching import CachingEncoder
from embedkit.evaluation import RetrievalEvaluator, StsEvaluator
from embedkit.evaluation.pseudo_queries import PSEUDO_METRICS, PseudoQuerySet, evaluate_pseudo
from embedkit.evaluation.sts_retrieval import RECALL_KS, evaluate_sts_retrieval, sts_retrieval_task

RETRIEVAL_TABLE_METRIC = "ndcg@10"  # BEIR's headline metric; the run files keep all the others


class Evaluations:
    """Every evaluation of the experiment, built once (files are read and checked up front)."""

    def __init__(
        self,
        sts: Sequence[str],
        retrieval: Sequence[str],
        sts_retrieval: Sequence[str],
        pseudo: PseudoQuerySet | None,
        batch: int,
    ) -> None:
        """STS files, BEIR folders, STS files searched as retrieval, pseudo queries; `batch`: texts
        per encoder call."""
        self.sts = StsEvaluator(list(sts), batch_size=batch) if sts else None
        names = _unique_names([Path(p) for p in retrieval])
        self.retrieval = [(n, RetrievalEvaluator(p, batch_size=batch, mode="dense")) for n, p in names]
        # read and checked now, so a bad file fails before the first run trains
        sts_names = _unique_names([Path(p) for p in sts_retrieval])
        self.sts_retrieval = [(n.removesuffix(".tsv"), p, sts_retrieval_task(p)) for n, p in sts_names]
        self.pseudo = pseudo
        self.batch_size = batch

    def __call__(self, encoder: Any) -> tuple[dict[str, float], dict[str, Any]]:
        """Table metrics (x100) and each evaluator's full output."""
        encoder = CachingEncoder(encoder)
        metrics: dict[str, float] = {}
        details: dict[str, Any] = {}
        if self.sts is not None:
            for result in self.sts.evaluate(encoder):
                metrics[f"{result.name} spearman"] = result.spearman_cosine
                details[result.name] = {"spearman_cosine": result.spearman_cosine, "pairs": result.pairs}
        for name, evaluator in self.retrieval:
            scores = evaluator(encoder)
            metrics[f"{name} {RETRIEVAL_TABLE_METRIC}"] = 100.0 * scores[RETRIEVAL_TABLE_METRIC]
            details[name] = scores
        for name, _, task in self.sts_retrieval:
            scores = evaluate_sts_retrieval(encoder, task, batch_size=self.batch_size)
            metrics.update({f"{name} R@{k}": scores[f"recall@{k}"] for k in RECALL_KS})
            details[f"{name} retrieval"] = scores
        if self.pseudo is not None:
            scores = evaluate_pseudo(encoder, self.pseudo, batch_size=self.batch_size)
            metrics.update({f"pseudo {m}": 100.0 * scores[m] for m in PSEUDO_METRICS})
            details["pseudo"] = scores
        return metrics, details

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "sts": [str(p.resolve()) for p in (self.sts.paths if self.sts else [])],
            "retrieval": [str(e.beir_dir.resolve()) for _, e in self.retrieval],
            "pseudo": self.pseudo.fingerprint if self.pseudo else None,
        }
        if self.sts_retrieval:  # only when asked, so earlier experiment folders keep their key
            described["sts_retrieval"] = [str(p.resolve()) for _, p, _ in self.sts_retrieval]
        return described


def _unique_names(paths: list[Path]) -> list[tuple[str, Path]]:
    names = [p.name or str(p) for p in paths]
    if len(set(names)) < len(names):
        names = [str(p) for p in paths]
    return list(zip(names, paths, strict=True))


__all__ = ["RETRIEVAL_TABLE_METRIC", "Evaluations"]
