"""Embedding-level loss terms of the miCSE objective: InfoNCE with a queue, and L2 reconstruction.

Both are pure functions of tensors; the trainer embeds the two dropout views and composes the
terms (with the attention term of `embedkit.training.ami`). Shapes: B sentences, D dimensions,
Q queued keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(
    e1: torch.Tensor,
    e2: torch.Tensor,
    queue: torch.Tensor | None = None,
    temperature: float = 0.05,
) -> torch.Tensor:
    """InfoNCE over two dropout views, with extra negatives from a queue of momentum keys.

    miCSE (Klein & Nabi, ACL 2023) Eq. 1-2, which extends SimCSE (Gao et al. 2021) Eq. 1 with the
    momentum encoder's queued keys (MoCo, He et al. 2020). For anchor ``e1[i]`` the candidates are
    ``[e2[0], ..., e2[B-1], queue[0], ..., queue[Q-1]]``; the logit of each is its cosine
    similarity to ``e1[i]`` divided by ``temperature``, and the loss is the cross-entropy with
    target ``i``, averaged over the batch. Negatives are therefore the other in-batch ``e2`` rows
    and every queue row.

    Implemented as cross-entropy, so the positive pair also appears in the denominator, as in
    SimCSE's and ESimCSE's code; the paper's Eq. 2 as printed leaves it out of the denominator.

    Args:
        e1: (B, D) anchors, the first dropout view (gradients flow).
        e2: (B, D) positives, the second dropout view of the same sentences (gradients flow).
        queue: (Q, D) detached keys from the momentum encoder; ``None`` or Q = 0 means in-batch
            negatives only.
        temperature: tau; 0.05 is SimCSE's and miCSE's setting.

    Returns:
        A float32 scalar. The similarities are computed in float32 even under autocast, because
        logits of magnitude up to 1/tau = 20 lose precision in half precision.

    Example:
        >>> e1, e2 = torch.randn(8, 32), torch.randn(8, 32)
        >>> loss = info_nce(e1, e2, queue=torch.randn(16, 32))
    """
    if e1.ndim != 2 or e1.shape != e2.shape:
        raise ValueError(
            f"info_nce needs two (B, D) views of one shape, got {tuple(e1.shape)} and {tuple(e2.shape)}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if queue is not None and (queue.ndim != 2 or queue.shape[1] != e1.shape[1]):
        raise ValueError(f"the queue must be (Q, {e1.shape[1]}), got {tuple(queue.shape)}")
    with torch.autocast(device_type=e1.device.type, enabled=False):
        keys = e2.float()
        if queue is not None and queue.shape[0] > 0:
            keys = torch.cat([keys, queue.detach().to(device=e1.device, dtype=torch.float32)])
        anchors = F.normalize(e1.float(), dim=-1)
        logits = anchors @ F.normalize(keys, dim=-1).T / temperature  # (B, B + Q)
        labels = torch.arange(e1.shape[0], device=e1.device)
        return F.cross_entropy(logits, labels)


def reconstruction_loss(e1: torch.Tensor, e2: torch.Tensor) -> torch.Tensor:
    """L2 reconstruction between the two views: the mean over the batch of ``||e1 - e2||^2``.

    InforMin-CL (Chen et al. 2022) adds a reconstruction term that predicts one view from the
    other. We use the identity as the reconstruction (no decoder network), so the term simply
    pulls the two views' vectors together. It acts on the un-normalised pooled vectors, so it
    also penalises differences in norm, which the cosine-based InfoNCE cannot see.

    Args:
        e1: (B, D) pooled vectors of the first view.
        e2: (B, D) pooled vectors of the second view.

    Returns:
        A float32 scalar (computed in float32 even under autocast).
    """
    if e1.ndim != 2 or e1.shape != e2.shape:
        raise ValueError(
            "reconstruction_loss needs two (B, D) views of one shape, "
            f"got {tuple(e1.shape)} and {tuple(e2.shape)}"
        )
    with torch.autocast(device_type=e1.device.type, enabled=False):
        return (e1.float() - e2.float()).pow(2).sum(dim=-1).mean()
