"""InfoNCE with a queue and the reconstruction term against hand-written float64 references."""

from __future__ import annotations

import math

import pytest
import torch

from embedkit.training.losses import info_nce, reconstruction_loss


def reference_info_nce(e1: torch.Tensor, e2: torch.Tensor, queue: torch.Tensor | None, tau: float) -> float:
    """Explicit loops and log-sum-exp in float64: -log softmax of the positive among all candidates."""
    a = e1.detach().double().tolist()
    keys = e2.detach().double().tolist() + ([] if queue is None else queue.double().tolist())

    def cosine(x: list[float], y: list[float]) -> float:
        dot = sum(p * q for p, q in zip(x, y, strict=True))
        return dot / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))

    total = 0.0
    for i, anchor in enumerate(a):
        logits = [cosine(anchor, key) / tau for key in keys]
        top = max(logits)
        log_sum = top + math.log(sum(math.exp(v - top) for v in logits))
        total += log_sum - logits[i]
    return total / len(a)


def test_info_nce_with_queue_matches_reference() -> None:
    g = torch.Generator().manual_seed(0)
    e1, e2, queue = (
        torch.randn(6, 8, generator=g),
        torch.randn(6, 8, generator=g),
        torch.randn(5, 8, generator=g),
    )
    loss = info_nce(e1, e2, queue, temperature=0.05)
    assert loss.dtype == torch.float32 and loss.ndim == 0
    assert loss.item() == pytest.approx(reference_info_nce(e1, e2, queue, 0.05), rel=1e-5)


def test_info_nce_in_batch_when_queue_is_absent_or_empty() -> None:
    g = torch.Generator().manual_seed(1)
    e1, e2 = torch.randn(7, 4, generator=g), torch.randn(7, 4, generator=g)
    expected = reference_info_nce(e1, e2, None, 0.1)
    assert info_nce(e1, e2, None, temperature=0.1).item() == pytest.approx(expected, rel=1e-5)
    assert info_nce(e1, e2, torch.zeros(0, 4), temperature=0.1).item() == pytest.approx(expected, rel=1e-5)


def test_info_nce_queue_adds_negatives() -> None:
    # Identical views and a queue that holds the anchors' exact copies: every queue row of anchor i
    # ties with the positive, so the loss is log(1 + number of ties) in the limit of small tau.
    e = torch.eye(3)
    assert info_nce(e, e, None, temperature=0.01).item() == pytest.approx(0.0, abs=1e-6)
    assert info_nce(e, e, e.clone(), temperature=0.01).item() == pytest.approx(math.log(2), rel=1e-5)


def test_info_nce_gradients_flow_to_both_views_not_queue() -> None:
    g = torch.Generator().manual_seed(2)
    e1 = torch.randn(4, 8, generator=g, requires_grad=True)
    e2 = torch.randn(4, 8, generator=g, requires_grad=True)
    queue = torch.randn(3, 8, generator=g, requires_grad=True)
    info_nce(e1, e2, queue).backward()
    assert e1.grad.abs().sum() > 0 and e2.grad.abs().sum() > 0
    assert queue.grad is None


def test_info_nce_is_float32_under_autocast() -> None:
    g = torch.Generator().manual_seed(3)
    e1, e2, queue = (
        torch.randn(8, 16, generator=g),
        torch.randn(8, 16, generator=g),
        torch.randn(4, 16, generator=g),
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = info_nce(e1, e2, queue)
    assert mixed.dtype == torch.float32
    assert mixed.item() == pytest.approx(reference_info_nce(e1, e2, queue, 0.05), rel=1e-5)


def test_info_nce_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="two \\(B, D\\) views of one shape"):
        info_nce(torch.randn(4, 8), torch.randn(3, 8))
    with pytest.raises(ValueError, match="queue must be \\(Q, 8\\)"):
        info_nce(torch.randn(4, 8), torch.randn(4, 8), torch.randn(3, 7))
    with pytest.raises(ValueError, match="temperature must be positive"):
        info_nce(torch.randn(4, 8), torch.randn(4, 8), temperature=0.0)


def test_reconstruction_loss_by_hand() -> None:
    e1 = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    e2 = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    # (1 + 4 + 9 + 16) / 2 sentences
    assert reconstruction_loss(e1, e2).item() == pytest.approx(15.0)
    assert reconstruction_loss(e1, e1).item() == 0.0
    with pytest.raises(ValueError, match="reconstruction_loss needs two"):
        reconstruction_loss(e1, e2[:1])
