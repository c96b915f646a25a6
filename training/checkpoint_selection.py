"""Checkpoint selection: the dev evaluator `embedkit train` scores the base and its checkpoints with.

The evaluators are the runtime's own (`embedkit.evaluation`), so a dev score in `metrics.jsonl`
means what `embedkit eval` prints for the same data:
- `--dev-sts FILE`: `StsEvaluator`, Spearman x 100 of cosine similarities against gold scores,
  SimCSE's model selection on STS-B dev (Gao et al. 2021, Sec. 4). Needs labelled pairs.
- `--dev-retrieval BEIR_DIR`: `RetrievalEvaluator`, nDCG@10 on the user's own judged queries; the
  base model is kept when no checkpoint beats it (`save.keeps_base`).
- `--dev-pseudo N`: `PseudoQueryEvaluator`, nDCG@10 on N pseudo queries cut from the training
  corpus itself (the inverse cloze task of Lee et al. 2019). Label-free and in-domain: what a user
  with documents but no judgments can select on. The query sentences are held out of training.

Both embed with the model's inference path (eval mode, no training head, no dropout) at the base
model's inference length: the vectors a user of the saved folder gets.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embedkit.encode.batching import TokenBatcher, encode_in_order, l2_normalize
from embedkit.encode.protocol import EncoderBase
from embedkit.errors import InputError
from embedkit.evaluation.evaluator import Evaluator, primary_score
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel


class InferenceEncoder(EncoderBase):
    """The training model's sentence vectors as an `Encoder`, for the evaluators."""

    backend = "torch"

    def __init__(
        self, model: ContrastiveModel, batcher: TokenBatcher, dtype: torch.dtype | None, path: Path
    ) -> None:
        self.model, self.batcher, self.dtype = model, batcher, dtype
        self.path = path  # the base model's folder: the weights change as training goes
        self.dim = model.dim
        self.max_seq_length = batcher.max_seq_length
        self.fingerprint = "training"  # no file holds these weights yet

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def truncated(self) -> int:
        return self.batcher.truncated

    @torch.no_grad()
    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        device = self.device
        enabled = self.dtype is not None

        def run(batch: Any) -> np.ndarray:
            names = ("input_ids", "attention_mask", "token_type_ids")
            inputs = {k: torch.from_numpy(getattr(batch, k)).to(device) for k in names}
            with torch.autocast(device.type, dtype=self.dtype or torch.float32, enabled=enabled):
                return self.model.sentence_vectors(inputs).float().cpu().numpy()

        was_training = self.model.training
        self.model.eval()
        try:
            vectors = encode_in_order(self.batcher, texts, batch_size, self.dim, run, progress)
        finally:
            self.model.train(was_training)
        return vectors if normalize is False else l2_normalize(vectors)


def dev_label(evaluator: Evaluator) -> str:
    """How the console names a dev score, e.g. "dev sts spearman_cosine"."""
    return f"dev {evaluator.name} {evaluator.primary_metric}"


def dev_score(evaluator: Evaluator, encoder: InferenceEncoder) -> float:
    """The primary metric, larger is better; a score that is not finite ranks below every other."""
    value = primary_score(evaluator, evaluator(encoder))
    return value if math.isfinite(value) else -math.inf


def dev_evaluator(config: TrainConfig, corpus: Any) -> Evaluator | None:
    """The evaluator a validated `config` selects on (None without one); reads and checks its data."""
    batch_size = config.eval_batch_size
    if config.dev_sts:
        from embedkit.evaluation.sts import StsEvaluator

        return StsEvaluator(config.dev_sts, batch_size=batch_size)
    if config.dev_retrieval:
        from embedkit.evaluation.retrieval import RetrievalEvaluator

        return RetrievalEvaluator(config.dev_retrieval, batch_size=batch_size, mode="dense")
    if config.dev_pseudo:
        from embedkit.data.corpus import read_documents
        from embedkit.evaluation.pseudo_queries import PseudoQueryEvaluator, build_pseudo_queries

        if not isinstance(corpus, (str, Path)):
            raise InputError(
                "--dev-pseudo cuts queries from documents: give the corpus as a file or BEIR folder"
            )
        documents = read_documents(corpus, config.column)
        queries = build_pseudo_queries(documents, config.dev_pseudo, config.seed)
        return PseudoQueryEvaluator(queries, batch_size=batch_size)
    return None


__all__ = ["InferenceEncoder", "dev_evaluator", "dev_label", "dev_score"]
