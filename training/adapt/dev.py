"""The dev evaluation of `embedkit adapt`: every signal of `signals` for the student at one step.

Built once from the held-out pseudo queries (and the judged queries, when given); `scores` is then
called at step 0 with the base model and at each dev evaluation with the student.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedkit.evaluation.pseudo_kinds import PseudoQuery, document_frequencies
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.signals import (
    SIGNALS,
    rare_cut_queries,
    top_overlap,
    top_rows,
    word_drop_queries,
)
from embedkit.training.adapt.student import StudentEmbedder, dev_ndcg


class DevSet:
    """Held-out pseudo queries (as cut, with rare words cut out, with words dropped), their
    documents' near-copies, the base model's top 10 for each, and optionally a judged-query evaluator."""

    def __init__(
        self,
        queries: Sequence[PseudoQuery],
        copies: Sequence[set[int]],
        texts: Sequence[str],
        config: AdaptConfig,
        judged: Any | None = None,  # an `embedkit.evaluation.retrieval.RetrievalEvaluator`
    ) -> None:
        self.queries, self.copies, self.config, self.judged = list(queries), list(copies), config, judged
        self.rare, positions = rare_cut_queries(self.queries, document_frequencies(texts), len(texts))
        self.rare_copies = [self.copies[i] for i in positions]
        self.dropped, positions = word_drop_queries(self.queries)
        self.dropped_copies = [self.copies[i] for i in positions]
        self.base_top: np.ndarray | None = None  # the base model's top 10 rows per query (`remember_base`)

    def remember_base(self, embed: StudentEmbedder, doc_vectors: np.ndarray) -> None:
        """Keep the base model's top 10; call it before any step (a resumed run too: before loading)."""
        self.base_top = self._top(embed, doc_vectors)

    def scores(self, embed: StudentEmbedder, doc_vectors: np.ndarray) -> dict[str, float]:
        """Every signal's score (label -> value) of the model `embed` runs, against `doc_vectors`."""
        scores = {
            SIGNALS["pseudo"]: dev_ndcg(embed, self.queries, self.copies, doc_vectors, self.config),
            SIGNALS["rare-cut"]: dev_ndcg(embed, self.rare, self.rare_copies, doc_vectors, self.config),
            SIGNALS["word-drop"]: dev_ndcg(
                embed, self.dropped, self.dropped_copies, doc_vectors, self.config
            ),
        }
        if self.base_top is not None:
            scores[SIGNALS["base-overlap"]] = top_overlap(self._top(embed, doc_vectors), self.base_top)
        if self.judged is not None:
            embed.student.model.eval()
            scores[SIGNALS["judged"]] = float(self.judged(embed.student)["ndcg@10"])
        return scores

    def _top(self, embed: StudentEmbedder, doc_vectors: np.ndarray) -> np.ndarray:
        vectors = embed.inference([q.text for q in self.queries], self.config.query_max_length)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
        return top_rows(vectors, doc_vectors)


__all__ = ["DevSet"]
