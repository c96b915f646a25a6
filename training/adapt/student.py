"""The student of `embedkit adapt`: its sentence vectors, one step's loss, the label-free dev score.

`run` runs the steps; this module holds what a step computes (no state of its own).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import torch

from embedkit.encode.torch_backend import TorchEncoder
from embedkit.progress import ProgressBar
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.losses import candidate_cosines, listwise_kl
from embedkit.training.adapt.queries import Candidates, PseudoQuery
from embedkit.training.batches import autocast, pad_batch
from embedkit.training.losses import info_nce

HARD_NEGATIVES_PER_QUERY = 4  # InfoNCE's extra negatives per query, drawn from its hard negatives


class StudentEmbedder:
    """The student's sentence vectors: with gradient for queries, without for passages."""

    def __init__(self, student: TorchEncoder, dtype: torch.dtype | None) -> None:
        from embedkit.encode.batching import load_tokenizer, pad_token_id

        self.student, self.dtype = student, dtype
        self.tokenizers: dict[int, object] = {}
        self.pad_id = pad_token_id(student.path, load_tokenizer(student.path, student.max_seq_length))
        self._load_tokenizer = load_tokenizer

    def __call__(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """(B, D) vectors of `texts` cut at `max_length` tokens, in the model's current mode."""
        if max_length not in self.tokenizers:
            self.tokenizers[max_length] = self._load_tokenizer(self.student.path, max_length)
        encodings = self.tokenizers[max_length].encode_batch(list(texts))  # type: ignore[attr-defined]
        inputs = pad_batch(encodings, np.arange(len(texts)), self.pad_id, self.student.device)
        if not self.student.uses_token_type_ids:
            inputs.pop("token_type_ids")
        with autocast(self.student.device, self.dtype):
            hidden = self.student.model(**inputs).last_hidden_state
        return self.student.head(hidden, inputs["attention_mask"], True)

    @torch.no_grad()
    def inference(
        self, texts: Sequence[str], max_length: int, progress: bool = False, batch: int = 64
    ) -> np.ndarray:
        """Vectors in eval mode (no dropout), in order, longest first within the bar's batches."""
        model = self.student.model
        was_training = model.training
        model.eval()
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.student.dim), dtype=np.float32)
        try:
            with ProgressBar(
                len(texts), "refreshing vectors", enabled=progress and len(texts) > batch
            ) as bar:
                for start in range(0, len(order), batch):
                    rows = order[start : start + batch]
                    out[rows] = self([texts[i] for i in rows], max_length).float().cpu().numpy()
                    bar.advance(len(rows))
        finally:
            model.train(was_training)
        return out


def step_loss(
    embed: StudentEmbedder,
    queries: Sequence[PseudoQuery],
    mined: Sequence[Candidates],
    doc_vectors: torch.Tensor,
    config: AdaptConfig,
    rng: random.Random,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One batch's loss: listwise KL over each query's candidates, plus InfoNCE with hard negatives."""
    device = doc_vectors.device
    q = embed([x.text for x in queries], config.query_max_length)  # (B, D), with gradient
    passages = [x.positive for x in queries]
    if config.train_passages:
        positives = embed(passages, config.positive_max_length)
    else:
        positives = torch.from_numpy(embed.inference(passages, config.positive_max_length)).to(device)
    # the candidates: slot 0 is the query's own positive (row N + i of the pool), then the teacher's hits
    width = max(len(m.rows) for m in mined)
    n = doc_vectors.shape[0]
    index = torch.zeros((len(queries), width), dtype=torch.long)
    teacher = torch.zeros((len(queries), width))
    mask = torch.zeros((len(queries), width), dtype=torch.bool)
    for i, m in enumerate(mined):
        index[i, : len(m.rows)] = torch.tensor([n + i, *m.rows[1:]])
        teacher[i, : len(m.rows)] = torch.tensor(m.scores)
        mask[i, : len(m.rows)] = True
    pool = torch.cat([doc_vectors, positives.float()])
    student_scores = candidate_cosines(q, pool, index.to(device))
    kl = listwise_kl(
        student_scores, teacher.to(device), mask.to(device), config.temperature, config.teacher_temperature
    )
    terms = {"kl": kl.item()}
    loss = kl
    if config.nce_weight > 0:
        batch_sources = {x.source for x in queries}
        negatives = [
            r
            for m in mined
            for r in rng.sample(m.hard_negatives, min(HARD_NEGATIVES_PER_QUERY, len(m.hard_negatives)))
            if r not in batch_sources  # another query's positive is no negative
        ]
        nce = info_nce(q, positives, doc_vectors[negatives] if negatives else None, config.temperature)
        terms["nce"] = nce.item()
        loss = loss + config.nce_weight * nce
    return loss, terms


def dev_ndcg(
    embed: StudentEmbedder,
    queries: Sequence[PseudoQuery],
    copies: Sequence[set[int]],
    doc_vectors: np.ndarray,
    config: AdaptConfig,
) -> float:
    """Mean nDCG@10 of held-out pseudo queries, each with one relevant target: its positive passage.

    The target competes with every other document's vector except its source's and its copies';
    with one relevant document nDCG@10 is 1 / log2(1 + rank) within the top 10, else 0.
    """
    if not queries:
        return 0.0
    q = embed.inference([x.text for x in queries], config.query_max_length)
    targets = embed.inference([x.positive for x in queries], config.positive_max_length)
    q /= np.linalg.norm(q, axis=1, keepdims=True).clip(1e-12)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True).clip(1e-12)
    scores = q @ doc_vectors.T  # (Q, N)
    total = 0.0
    for i, query in enumerate(queries):
        excluded = [query.source, *copies[i]]
        scores[i, excluded] = -np.inf
        rank = 1 + int((scores[i] > float(q[i] @ targets[i])).sum())
        total += 1.0 / math.log2(1 + rank) if rank <= 10 else 0.0
    return total / len(queries)


__all__ = ["HARD_NEGATIVES_PER_QUERY", "StudentEmbedder", "dev_ndcg", "step_loss"]
