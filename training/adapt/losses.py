"""Listwise distillation of a ranker into the dense model: the loss terms of `embedkit adapt`.

Pure functions of tensors, as `embedkit.training.losses`; `embedkit.training.adapt` embeds the
queries and composes them with `losses.info_nce`. Shapes: B queries, C candidates, D dimensions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def listwise_kl(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    student_temperature: float = 0.05,
    teacher_temperature: float = 0.05,
) -> torch.Tensor:
    """KL(teacher || student) between the two rankers' softmax distributions over each query's list.

    Listwise distillation as in RocketQAv2 (Ren et al. 2021, "RocketQAv2: A Joint Training Method
    for Dense Passage Retrieval and Passage Re-ranking", Eq. 3-5) and Lin et al. 2021's listwise
    "distilling dense representations for ranking": for query i, p_t = softmax(teacher_i / tau_t)
    and p_s = softmax(student_i / tau_s) over its candidates, and the loss is
    sum_c p_t[c] (log p_t[c] - log p_s[c]), averaged over the queries. Where GPL (Wang et al.
    2022) fits the student to one margin between a positive and a negative (MarginMSE), this uses
    the teacher's whole ordering of the list, and its score gaps through the softmax.

    Args:
        student_scores: (B, C) the student's similarities (cosines; gradients flow).
        teacher_scores: (B, C) the teacher's scores of the same candidates (no gradient).
        mask: (B, C) bool, False where a query has fewer candidates (padding); None: all valid.
            Every row needs at least one valid candidate.
        student_temperature: tau_s, dividing the cosines (0.05: InfoNCE's, so both terms agree).
        teacher_temperature: tau_t, dividing the teacher's scores: how sharp its distribution is.

    Returns:
        A float32 scalar, computed in float32 even under autocast.

    Example:
        >>> loss = listwise_kl(torch.rand(4, 8), torch.rand(4, 8))
    """
    if student_scores.ndim != 2 or student_scores.shape != teacher_scores.shape:
        raise ValueError(
            f"listwise_kl needs (B, C) scores of one shape, got {tuple(student_scores.shape)} "
            f"and {tuple(teacher_scores.shape)}"
        )
    if student_temperature <= 0 or teacher_temperature <= 0:
        raise ValueError("temperatures must be positive")
    if mask is None:
        mask = torch.ones_like(student_scores, dtype=torch.bool)
    if mask.shape != student_scores.shape or not bool(mask.any(dim=1).all()):
        raise ValueError("the mask must be (B, C) with at least one candidate per query")
    with torch.autocast(device_type=student_scores.device.type, enabled=False):
        hidden = torch.finfo(torch.float32).min  # a masked candidate gets no probability on either side
        student = (student_scores.float() / student_temperature).masked_fill(~mask, hidden)
        teacher = (teacher_scores.detach().float() / teacher_temperature).masked_fill(~mask, hidden)
        log_p_student = F.log_softmax(student, dim=-1)
        log_p_teacher = F.log_softmax(teacher, dim=-1)
        terms = log_p_teacher.exp() * (log_p_teacher - log_p_student)  # (B, C)
        return terms.masked_fill(~mask, 0.0).sum(dim=-1).mean()


def candidate_cosines(queries: torch.Tensor, documents: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, C) cosines of query i with documents[index[i, c]].

    Args:
        queries: (B, D) query vectors (gradients flow).
        documents: (N, D) document vectors.
        index: (B, C) long, rows of `documents` (a padded position may hold any valid row).
    """
    q = F.normalize(queries.float(), dim=-1)
    d = F.normalize(documents.float(), dim=-1)
    return torch.einsum("bd,bcd->bc", q, d[index])


__all__ = ["candidate_cosines", "listwise_kl"]
