"""Checkpoint selection: the dev criterion `embedkit train` scores the base and its checkpoints on.

Two criteria, one interface (`DevCriterion`):
- `StsCriterion` (`--dev-sts FILE`): Spearman of cosine similarities against gold scores, SimCSE's
  model selection on STS-B dev (Gao et al. 2021, Sec. 4). Needs labelled pairs.
- `PseudoQueryCriterion` (`--dev-pseudo N`): nDCG@10 on N pseudo queries cut from the training
  corpus itself (the inverse cloze task of Lee et al. 2019, `embedkit.pseudo`). Label-free and
  in-domain: what a user with documents but no judgments can select on. The query sentences are
  held out of the training sentences.

Both embed with the model's inference path (eval mode, no training head, no dropout) at the base
model's inference length, the vectors a user of the saved folder gets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel

from embedkit.batching import TokenBatcher, encode_in_order, l2_normalize
from embedkit.errors import InputError


class InferenceEncoder:
    """`encode` over a training model's sentence vectors, for the evaluators of `embedkit`."""

    def __init__(self, model: ContrastiveModel, batcher: TokenBatcher, dtype: torch.dtype | None) -> None:
        self.model, self.batcher, self.dtype = model, batcher, dtype
        self.dim = model.dim

    @torch.no_grad()
    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        device = next(self.model.parameters()).device
        enabled = self.dtype is not None

        def run(batch: Any) -> np.ndarray:
            names = ("input_ids", "attention_mask", "token_type_ids")
            inputs = {k: torch.from_numpy(getattr(batch, k)).to(device) for k in names}
            with torch.autocast(device.type, dtype=self.dtype or torch.float32, enabled=enabled):
                return self.model.sentence_vectors(inputs).float().cpu().numpy()

        was_training = self.model.training
        self.model.eval()
        try:
            vectors = encode_in_order(self.batcher, list(texts), batch_size, self.dim, run, progress)
        finally:
            self.model.train(was_training)
        return vectors if normalize is False else l2_normalize(vectors)


class DevCriterion(Protocol):
    metric: str  # the key in metrics.jsonl is f"dev_{metric}"
    label: str  # how the console names it

    def score(self, encoder: InferenceEncoder, batch_size: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...


class StsCriterion:
    """Spearman x1 of cosine similarity against the gold scores of a sentence-pair file."""

    metric = "spearman"
    label = "dev Spearman"

    def __init__(self, path: str | Path) -> None:
        from embedkit.datasets import read_sts

        self.path = Path(path)
        self.data = read_sts(self.path)

    def score(self, encoder: InferenceEncoder, batch_size: int) -> float:
        from embedkit.metrics import spearman

        texts = list(dict.fromkeys([*self.data.sentences1, *self.data.sentences2]))
        row = {text: i for i, text in enumerate(texts)}
        vectors = encoder.encode(texts, batch_size=batch_size, normalize=True)
        a = vectors[[row[t] for t in self.data.sentences1]]
        b = vectors[[row[t] for t in self.data.sentences2]]
        value = spearman((a * b).sum(axis=1), self.data.scores)
        return value if math.isfinite(value) else -1.0  # constant similarities rank nothing

    def describe(self) -> dict[str, Any]:
        return {"file": str(self.path), "metric": self.metric}


class PseudoQueryCriterion:
    """nDCG@10 on pseudo queries drawn from the training corpus, searched among all its documents."""

    metric = "ndcg@10"
    label = "dev pseudo-query nDCG@10"

    def __init__(self, corpus: str | Path, queries: int, seed: int, column: str | None) -> None:
        from embedkit.corpus import read_documents
        from embedkit.pseudo import build_pseudo_queries

        self.queries = build_pseudo_queries(read_documents(corpus, column), queries, seed)

    def exclude(self, sentences: list[str]) -> tuple[list[str], int]:
        """Training sentences without the held-out query sentences (and any that contain one)."""
        return self.queries.exclude(sentences)

    def score(self, encoder: InferenceEncoder, batch_size: int) -> float:
        from embedkit.pseudo import evaluate_pseudo

        return evaluate_pseudo(encoder, self.queries, batch_size=batch_size)[self.metric]

    def describe(self) -> dict[str, Any]:
        return {
            "pseudo_queries": len(self.queries.queries),
            "documents": len(self.queries.corpus),
            "seed": self.queries.seed,
            "fingerprint": self.queries.fingerprint,
            "metric": self.metric,
        }


def dev_criterion(config: TrainConfig, corpus: Any) -> StsCriterion | PseudoQueryCriterion | None:
    """The criterion a validated `config` asks for (None without one); reads and checks its data."""
    if config.dev_sts:
        return StsCriterion(config.dev_sts)
    if config.dev_pseudo:
        if not isinstance(corpus, (str, Path)):
            raise InputError(
                "--dev-pseudo cuts queries from documents: give the corpus as a file or BEIR folder"
            )
        return PseudoQueryCriterion(corpus, config.dev_pseudo, config.seed, config.column)
    return None


__all__ = ["DevCriterion", "InferenceEncoder", "PseudoQueryCriterion", "StsCriterion", "dev_criterion"]
