"""Embedding-level loss terms of the miCSE objective: InfoNCE with a queue, its Matryoshka form
over prefixes of the vectors with a similarity-preserving term, and L2 reconstruction.

All are pure functions of tensors; the trainer embeds the two dropout views and composes the
terms (with the attention term of `embedkit.training.ami`). Shapes: B sentences, D dimensions,
Q queued keys, M Matryoshka prefixes.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def matryoshka_info_nce(
    e1: torch.Tensor,
    e2: torch.Tensor,
    dims: Sequence[int],
    weights: Sequence[float],
    queue: torch.Tensor | None = None,
    temperature: float = 0.05,
) -> torch.Tensor:
    """InfoNCE at each prefix of the vectors: ``weights[k] * info_nce(e1[:, :m], e2[:, :m], queue[:, :m])``
    for each ``m = dims[k]``, every prefix L2-renormalized before its cosine similarities.

    Matryoshka Representation Learning (Kusupati et al., NeurIPS 2022), Eq. 1: the sum over the
    nested sizes ``m`` of ``c_m`` times the task loss computed on the first ``m`` dimensions of the
    representation. Here the task loss is the method's InfoNCE (`info_nce`); the paper's
    per-size classifier ``W^(m)`` becomes the cosine similarity against the other view's and the
    queue's prefixes, as in MRL's contrastive (ALIGN) experiments and sentence-transformers'
    ``MatryoshkaLoss``. The paper sets every ``c_m`` to 1; so does `TrainConfig`'s default. With
    ``dims = [D]`` and weight 1 it is `info_nce` itself.

    Args:
        e1: (B, D) anchors (gradients flow).
        e2: (B, D) positives (gradients flow).
        dims: M prefix sizes, each in 1..D.
        weights: M non-negative weights ``c_m``, one per size.
        queue: (Q, D) detached keys, truncated like the views; ``None`` for in-batch negatives.
        temperature: tau of every InfoNCE term.

    Returns:
        (M,) float32: each size's weighted InfoNCE; their sum is the loss.

    Example:
        >>> e1, e2 = torch.randn(8, 32), torch.randn(8, 32)
        >>> terms = matryoshka_info_nce(e1, e2, dims=[32, 16, 8], weights=[1.0, 1.0, 1.0])
        >>> loss = terms.sum()
    """
    if len(dims) != len(weights) or not dims:
        raise ValueError(
            f"matryoshka_info_nce needs one weight per size, got {list(dims)} and {list(weights)}"
        )
    if any(not 1 <= m <= e1.shape[-1] for m in dims):
        raise ValueError(f"prefix sizes must be in 1..{e1.shape[-1]}, got {list(dims)}")
    terms = []
    with torch.autocast(device_type=e1.device.type, enabled=False):
        for m, weight in zip(dims, weights, strict=True):
            # the first m dimensions, renormalized: the vector a user keeps with m dimensions
            a, p = (F.normalize(x[:, :m].float(), dim=-1) for x in (e1, e2))
            q = None if queue is None else F.normalize(queue[:, :m].float(), dim=-1)
            terms.append(weight * info_nce(a, p, q, temperature))
    return torch.stack(terms)


def matryoshka_similarity(
    e1: torch.Tensor,
    keys: torch.Tensor,
    dims: Sequence[int],
    weights: Sequence[float],
) -> torch.Tensor:
    """How far each smaller prefix's cosine similarities are from the whole vector's: for each
    ``m = dims[k]`` (k >= 1), ``weights[k]`` times the mean over anchor-key pairs of
    ``|cos(e1[i, :m], keys[j, :m]) - cos(e1[i], keys[j])|``, the whole vector's side detached.

    The pairwise similarity loss of Matryoshka-Adaptor (Yoon et al., EMNLP 2024, Sec. 3, L_pair):
    a prefix keeps the retrieval quality of the whole vector to the extent that it ranks pairs as
    the whole vector does. There the reference is a frozen model's full embedding; here it is the
    whole vector of the model in training (``dims[0]``, trained by the method's own InfoNCE), so the
    prefixes follow it and never pull it toward themselves. Unlike InfoNCE, whose value on two
    dropout views of a trained encoder is near zero at every prefix (nothing left to learn), this
    term is large wherever the prefix reorders neighbours.

    Args:
        e1: (B, D) anchors, the first dropout view (gradients flow into the prefixes).
        keys: (K, D) what they are compared with: the other view's vectors and the queued
            momentum keys (gradients flow into their prefixes where they carry any).
        dims: M prefix sizes, largest first; ``dims[0]`` is the reference, the whole vector.
        weights: M weights, one per size; ``weights[0]`` is unused (the reference has no term).

    Returns:
        (M - 1,) float32: each smaller size's weighted term; their sum joins the loss.

    Example:
        >>> e1, keys = torch.randn(8, 32), torch.randn(24, 32)
        >>> terms = matryoshka_similarity(e1, keys, dims=[32, 16, 8], weights=[1.0, 1.0, 1.0])
        >>> terms.shape
        torch.Size([2])
    """
    if len(dims) != len(weights) or not dims:
        raise ValueError(
            f"matryoshka_similarity needs one weight per size, got {list(dims)} and {list(weights)}"
        )
    if e1.ndim != 2 or keys.ndim != 2 or keys.shape[1] != e1.shape[1]:
        raise ValueError(
            f"need (B, D) anchors and (K, D) keys, got {tuple(e1.shape)} and {tuple(keys.shape)}"
        )
    if any(not 1 <= m <= e1.shape[-1] for m in dims) or list(dims) != sorted(dims, reverse=True):
        raise ValueError(f"prefix sizes must be in 1..{e1.shape[-1]}, largest first, got {list(dims)}")
    with torch.autocast(device_type=e1.device.type, enabled=False):
        anchors, others = e1.float(), keys.float().to(e1.device)

        def cosines(m: int) -> torch.Tensor:
            return F.normalize(anchors[:, :m], dim=-1) @ F.normalize(others[:, :m], dim=-1).T

        reference = cosines(dims[0]).detach()
        terms = [
            weight * (cosines(m) - reference).abs().mean()
            for m, weight in zip(dims[1:], weights[1:], strict=True)
        ]
    return torch.stack(terms) if terms else torch.zeros(0, device=e1.device)


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
