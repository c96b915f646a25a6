"""A step's InfoNCE terms: the method's own on its training vectors, and Matryoshka's on the prefixes.

The method's InfoNCE (SimCSE, miCSE: Eq. 1 of each paper) compares the two views after SimCSE's
training-only MLP head, with the momentum queue's keys as extra negatives. With Matryoshka
Representation Learning (Kusupati et al., NeurIPS 2022) the same InfoNCE is added at each smaller
prefix of the vectors the model folder saves (after the rotation, without the head, which is not
saved): `info_nce@m`, weighted c_m, against the queue's keys as saved. So at full size a Matryoshka
run trains as the run without it does, plus the prefix terms; the queue then holds both kinds of key
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
    """`info_nce` of the views after the head (B, D); with Matryoshka (`saved`: both views as saved,
    (B, D) each), `info_nce@m` at each smaller prefix and, with `matryoshka_similarity`, `similarity@m`."""
    dims, weights = config.matryoshka
    if not dims:
        return {"info_nce": losses.info_nce(e1, e2, queue=queued, temperature=config.temperature)}
    if saved is None:
        raise ValueError("Matryoshka's prefix terms need the views as saved (before the head)")
    dim = e1.shape[-1]
    head_keys, saved_keys = (None, None) if queued is None else (queued[:, :dim], queued[:, dim:])
    # dims[0] is the whole vector (TrainConfig.check_matryoshka): the method's own term, weighted c_D
    terms = {
        "info_nce": weights[0] * losses.info_nce(e1, e2, queue=head_keys, temperature=config.temperature)
    }
    if len(dims) == 1:
        return terms
    s1, s2 = saved
    per_size = losses.matryoshka_info_nce(s1, s2, dims[1:], weights[1:], saved_keys, config.temperature)
    terms |= dict(zip((f"info_nce@{m}" for m in dims[1:]), per_size.unbind(), strict=True))
    if config.matryoshka_similarity > 0:
        keys = s2 if saved_keys is None else torch.cat([s2, saved_keys.to(s2.dtype)])
        scaled = [config.matryoshka_similarity * w for w in weights]
        similarity = losses.matryoshka_similarity(s1, keys, dims, scaled)  # (M - 1,)
        terms |= dict(zip((f"similarity@{m}" for m in dims[1:]), similarity.unbind(), strict=True))
    return terms


__all__ = ["contrastive_terms"]
