"""A step's InfoNCE terms: the method's own on its training vectors, and Matryoshka's on the prefixes.

The method's InfoNCE (SimCSE, miCSE: Eq. 1 of each paper) compares the two views after SimCSE's
training-only MLP head, with the momentum queue's keys as extra negatives. With Matryoshka
Representation Learning (Kusupati et al., NeurIPS 2022) and a positive weight c_m for a smaller size,
the same InfoNCE is added at that prefix of the vectors the model folder saves (rotated, without the
head, which is not saved): `info_nce@m`, weighted c_m, against the queue's keys as saved. The head
reads the vectors before the rotation, so with no prefix trained (the default) a Matryoshka run's
steps are those of the run without it. Where prefixes are trained the queue holds both kinds of key
side by side, (Q, 2D): the head's, then the saved ones (`ContrastiveModel._momentum_keys`).
"""

from __future__ import annotations

import torch

from embedkit.training import losses
from embedkit.training.config import TrainConfig


def contrastive_terms(
    e1: torch.Tensor,
    e2: torch.Tensor,
    saved: tuple[torch.Tensor, torch.Tensor] | None,
    queued: torch.Tensor | None,
    config: TrainConfig,
) -> dict[str, torch.Tensor]:
    """`info_nce` of the views after the head (B, D); where prefixes are trained (`saved`: both
    views as saved, (B, D) each), `info_nce@m` at each smaller prefix of positive weight and, with
    `matryoshka_similarity`, `similarity@m` at each smaller prefix."""
    dims, weights = config.matryoshka
    if not config.trains_prefixes:
        weight = weights[0] if weights else 1.0
        return {"info_nce": weight * losses.info_nce(e1, e2, queue=queued, temperature=config.temperature)}
    if saved is None:
        raise ValueError("Matryoshka's prefix terms need the views as saved (before the head)")
    dim = e1.shape[-1]
    head_keys, saved_keys = (None, None) if queued is None else (queued[:, :dim], queued[:, dim:])
    # dims[0] is the whole vector (TrainConfig.check_matryoshka): the method's own term, weighted c_D
    terms = {
        "info_nce": weights[0] * losses.info_nce(e1, e2, queue=head_keys, temperature=config.temperature)
    }
    s1, s2 = saved
    trained = [(m, w) for m, w in zip(dims[1:], weights[1:], strict=True) if w > 0]
    if trained:
        sizes, size_weights = zip(*trained, strict=True)
        per_size = losses.matryoshka_info_nce(s1, s2, sizes, size_weights, saved_keys, config.temperature)
        terms |= dict(zip((f"info_nce@{m}" for m in sizes), per_size.unbind(), strict=True))
    if config.matryoshka_similarity > 0:
        keys = s2 if saved_keys is None else torch.cat([s2, saved_keys.to(s2.dtype)])
        scaled = [config.matryoshka_similarity] * len(dims)  # the first, the reference's, is unused
        similarity = losses.matryoshka_similarity(s1, keys, dims, scaled)  # (M - 1,)
        terms |= dict(zip((f"similarity@{m}" for m in dims[1:]), similarity.unbind(), strict=True))
    return terms


__all__ = ["contrastive_terms"]
