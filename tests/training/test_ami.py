"""AMI (miCSE Sec. 2.2, Algorithm 1) against a literal loop reference and known correlations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from embedkit.training.ami import (
    ami_layers,
    ami_loss,
    ami_valid_entries,
    attention_mutual_information,
    sample_slice_entries,
)


def random_attention(
    batch: int = 5, heads: int = 5, length: int = 7, num_layers: int = 4, seed: int = 0
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Two views of softmax attention with padded keys (exact zeros) and dropout-like exact zeros."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, length + 1, (batch,), generator=g)
    lengths[0] = length
    lengths[-1] = 1  # one token: two entries per slice, too few for a correlation
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # (B, T)
    bias = torch.zeros(batch, 1, 1, length).masked_fill(mask[:, None, None, :] == 0, float("-inf"))
    views = []
    for _ in range(2):
        layers = []
        for _ in range(num_layers):
            logits = torch.randn(batch, heads, length, length, generator=g) * 2
            probs = torch.softmax(logits + bias, dim=-1)
            dropped = torch.rand(probs.shape, generator=g) < 0.2
            layers.append(probs.masked_fill(dropped, 0.0))
        views.append(layers)
    return views[0], views[1], mask


def reference_ami(
    attn1: list[torch.Tensor],
    attn2: list[torch.Tensor],
    mask: torch.Tensor,
    layers: tuple[int, ...],
    indices: torch.Tensor,
    sample_mask: torch.Tensor,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 literally: loops over sentences, layers and head pairs, float64 numpy."""
    a1 = [a.detach().double().numpy() for a in attn1]
    a2 = [a.detach().double().numpy() for a in attn2]
    m = mask.numpy()
    batch, heads, length, _ = a1[0].shape
    pairs = heads // 2
    mi = np.zeros((batch, len(layers) * pairs))
    ok = np.zeros((batch, len(layers) * pairs), dtype=bool)
    for b in range(batch):
        for j, layer in enumerate(layers):
            for p in range(pairs):
                s = j * pairs + p
                x, y = [], []
                for slot in range(indices.shape[-1]):
                    if not sample_mask[b, s, slot]:
                        continue
                    n = int(indices[b, s, slot])
                    head = 2 * p + n // (length * length)
                    q, k = (n % (length * length)) // length, n % length
                    w1, w2 = a1[layer][b, head, q, k], a2[layer][b, head, q, k]
                    if m[b, q] and m[b, k] and w1 > 0 and w2 > 0:
                        x.append(math.log(w1))
                        y.append(math.log(w2))
                if len(x) < 3:
                    continue
                xc, yc = np.array(x) - np.mean(x), np.array(y) - np.mean(y)
                rho = float(xc @ yc / math.sqrt((xc @ xc) * (yc @ yc)))
                mi[b, s] = -0.5 * math.log(1 - min(rho * rho, 1 - 1e-6))
                ok[b, s] = True
    return mi, ok


def reference_valid(attn1, attn2, mask, layers) -> np.ndarray:
    """(B, S, N) validity by explicit loops over every entry."""
    batch, heads, length, _ = attn1[0].shape
    pairs = heads // 2
    out = np.zeros((batch, len(layers) * pairs, 2 * length * length), dtype=bool)
    for b in range(batch):
        for j, layer in enumerate(layers):
            for p in range(pairs):
                for h in range(2):
                    for q in range(length):
                        for k in range(length):
                            w1 = float(attn1[layer][b, 2 * p + h, q, k])
                            w2 = float(attn2[layer][b, 2 * p + h, q, k])
                            good = bool(mask[b, q]) and bool(mask[b, k]) and w1 > 0 and w2 > 0
                            out[b, j * pairs + p, h * length * length + q * length + k] = good
    return out


def test_ami_layers_scale_with_depth() -> None:
    assert ami_layers(12) == (7, 8, 9, 10)
    assert ami_layers(6) == (4, 5)
    assert ami_layers(4) == (2, 3)
    assert ami_layers(1) == (0,)
    assert ami_layers(2) == (1,)
    assert ami_layers(24) == tuple(range(14, 22))
    with pytest.raises(ValueError, match="at least one layer"):
        ami_layers(0)


def test_valid_entries_match_loops() -> None:
    attn1, attn2, mask = random_attention(batch=3, heads=5, length=5)
    valid = ami_valid_entries(attn1, attn2, mask, layers=(1, 3))
    np.testing.assert_array_equal(valid.numpy(), reference_valid(attn1, attn2, mask, (1, 3)))


def test_ami_matches_literal_reference() -> None:
    attn1, attn2, mask = random_attention(batch=6, heads=5, length=8)
    layers = (2, 3)
    valid = ami_valid_entries(attn1, attn2, mask, layers)
    indices, sample_mask = sample_slice_entries(valid, 40, torch.Generator().manual_seed(1))
    mi, ok = attention_mutual_information(attn1, attn2, mask, layers=layers, indices=(indices, sample_mask))
    ref_mi, ref_ok = reference_ami(attn1, attn2, mask, layers, indices, sample_mask)
    assert mi.dtype == torch.float32
    np.testing.assert_array_equal(ok.numpy(), ref_ok)
    assert ref_ok.sum() > 10 and (~ref_ok).sum() >= 1  # both kinds occur (short sentences)
    np.testing.assert_allclose(mi.numpy(), ref_mi, rtol=1e-5, atol=1e-5)


def test_ami_loss_is_minus_weight_times_mean_over_valid_slices() -> None:
    attn1, attn2, mask = random_attention(batch=6, heads=4, length=8)
    mi, ok = attention_mutual_information(attn1, attn2, mask, generator=torch.Generator().manual_seed(3))
    loss = ami_loss(attn1, attn2, mask, weight=0.01, generator=torch.Generator().manual_seed(3))
    expected = -0.01 * mi.numpy()[ok.numpy()].astype(np.float64).mean()
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_given_indices_that_are_invalid_are_ignored() -> None:
    attn1, attn2, mask = random_attention(batch=4, heads=4, length=6)
    valid = ami_valid_entries(attn1, attn2, mask, (2, 3))
    n = valid.shape[-1]
    every = torch.arange(n).expand(*valid.shape[:2], n)
    mi_all, ok_all = attention_mutual_information(
        attn1, attn2, mask, layers=(2, 3), indices=(every, torch.ones_like(valid))
    )
    ref_mi, ref_ok = reference_ami(attn1, attn2, mask, (2, 3), every, torch.ones_like(valid))
    np.testing.assert_array_equal(ok_all.numpy(), ref_ok)
    np.testing.assert_allclose(mi_all.numpy(), ref_mi, rtol=1e-5, atol=1e-5)


def test_padding_values_do_not_change_ami() -> None:
    attn1, attn2, mask = random_attention(batch=6, heads=4, length=8, seed=4)
    padded = (mask[:, :, None] == 0) | (mask[:, None, :] == 0)  # (B, T, T): query or key padded
    assert padded.any()
    noisy1 = [a.masked_fill(padded[:, None], 0.37) for a in attn1]
    noisy2 = [a + padded[:, None] * torch.rand(a.shape) for a in attn2]
    before, ok_before = attention_mutual_information(
        attn1, attn2, mask, generator=torch.Generator().manual_seed(5)
    )
    after, ok_after = attention_mutual_information(
        noisy1, noisy2, mask, generator=torch.Generator().manual_seed(5)
    )
    torch.testing.assert_close(after, before)
    assert torch.equal(ok_after, ok_before)


def test_gradient_reaches_both_views_and_not_padding() -> None:
    base1, base2, mask = random_attention(batch=4, heads=4, length=8, seed=6)
    attn1 = [a.clone().requires_grad_(True) for a in base1]
    attn2 = [a.clone().requires_grad_(True) for a in base2]
    loss = ami_loss(attn1, attn2, mask, generator=torch.Generator().manual_seed(0))
    loss.backward()
    layers = ami_layers(len(attn1))
    padded = (mask[:, :, None] == 0) | (mask[:, None, :] == 0)
    for views in (attn1, attn2):
        for i, a in enumerate(views):
            if i in layers:
                assert a.grad is not None and a.grad.abs().sum() > 0
                assert torch.all(a.grad.masked_select(padded[:, None].expand_as(a)) == 0)
                assert torch.isfinite(a.grad).all()
            else:
                assert a.grad is None or torch.all(a.grad == 0)


def test_no_valid_slice_gives_zero_with_graph() -> None:
    attn1 = [torch.rand(2, 2, 4, 4, requires_grad=True) for _ in range(2)]
    attn2 = [torch.rand(2, 2, 4, 4, requires_grad=True) for _ in range(2)]
    mask = torch.tensor([[1, 0, 0, 0], [1, 0, 0, 0]])  # one real token: a single entry per head
    loss = ami_loss(attn1, attn2, mask)
    assert loss.item() == 0.0
    loss.backward()
    assert all(torch.isfinite(a.grad).all() for a in attn1 + attn2 if a.grad is not None)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8, 0.95])
def test_estimator_recovers_gaussian_mutual_information(rho: float) -> None:
    """Log-normal pairs with log-correlation rho: mean I ~= -1/2 log(1 - rho^2)."""
    g = torch.Generator().manual_seed(int(rho * 100))
    batch, heads, length, num_layers = 32, 8, 10, 2  # 32 x 8 slices of 200 entries, 150 sampled
    shape = (batch, heads, length, length)
    attn1, attn2 = [], []
    for _ in range(num_layers):
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        y = rho * x + math.sqrt(1 - rho * rho) * torch.randn(shape, generator=g, dtype=torch.float64)
        attn1.append((0.3 * x - 3).exp().float())
        attn2.append((0.3 * y - 3).exp().float())
    mask = torch.ones(batch, length, dtype=torch.long)
    mi, ok = attention_mutual_information(attn1, attn2, mask, layers=(0, 1), generator=g)
    assert ok.all() and mi.shape == (batch, num_layers * heads // 2)
    expected = -0.5 * math.log(1 - rho * rho)
    assert mi.double().mean().item() == pytest.approx(expected, abs=0.02)


def test_sampling_draws_valid_entries_without_replacement() -> None:
    g = torch.Generator().manual_seed(0)
    valid = torch.rand(20, 6, 300, generator=g) < torch.linspace(0.0, 0.9, 20)[:, None, None]
    indices, sample_mask = sample_slice_entries(valid, 150, torch.Generator().manual_seed(1))
    assert indices.shape == sample_mask.shape == (20, 6, 150) and indices.dtype == torch.long
    counts = valid.sum(-1)
    assert torch.equal(sample_mask.sum(-1), counts.clamp(max=150))
    drawn_valid = valid.gather(-1, indices)
    assert torch.all(drawn_valid[sample_mask])  # no invalid entry is ever drawn
    for b in range(20):
        for s in range(6):
            picked = indices[b, s][sample_mask[b, s]].tolist()
            assert len(set(picked)) == len(picked)  # without replacement
            if counts[b, s] <= 150:
                assert set(picked) == set(torch.nonzero(valid[b, s]).flatten().tolist())


def test_sampling_is_uniform_among_valid_entries() -> None:
    valid = torch.zeros(1, 1, 40, dtype=torch.bool)
    chosen = torch.tensor([0, 3, 7, 8, 15, 21, 22, 30, 38, 39])
    valid[..., chosen] = True
    valid = valid.expand(4000, 1, 40).contiguous()
    indices, sample_mask = sample_slice_entries(valid, 5, torch.Generator().manual_seed(2))
    assert sample_mask.all()
    frequency = torch.bincount(indices.flatten(), minlength=40).double() / 4000
    torch.testing.assert_close(
        frequency[chosen], torch.full((10,), 0.5, dtype=torch.float64), atol=0.03, rtol=0
    )
    assert frequency.sum().item() == pytest.approx(5.0)


def test_sample_size_is_capped_by_entries() -> None:
    valid = torch.ones(2, 3, 8, dtype=torch.bool)
    indices, sample_mask = sample_slice_entries(valid, 150)
    assert indices.shape == (2, 3, 8) and sample_mask.all()
    assert torch.equal(indices.sort(-1).values, torch.arange(8).expand(2, 3, 8))


def test_float32_under_autocast() -> None:
    attn1, attn2, mask = random_attention(batch=4, heads=4, length=8, seed=8)
    plain = ami_loss(attn1, attn2, mask, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = ami_loss(attn1, attn2, mask, generator=torch.Generator().manual_seed(0))
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, plain)


def test_bad_inputs_are_rejected() -> None:
    attn1, attn2, mask = random_attention(batch=2, heads=4, length=5)
    with pytest.raises(ValueError, match="same number of attention layers"):
        ami_loss(attn1, attn2[:-1], mask)
    with pytest.raises(
        ValueError, match="no attention maps: load the model with attn_implementation='eager'"
    ):
        ami_loss((), (), mask)  # what an SDPA model returns for output_attentions=True
    with pytest.raises(ValueError, match="attention_mask must be"):
        ami_loss(attn1, attn2, mask[:, :3])
    with pytest.raises(ValueError, match="0-based indices below 4"):
        ami_loss(attn1, attn2, mask, layers=(4,))
    with pytest.raises(ValueError, match="at least two attention heads"):
        ami_loss([a[:, :1] for a in attn1], [a[:, :1] for a in attn2], mask)
    with pytest.raises(ValueError, match="num_samples must be at least 1"):
        ami_loss(attn1, attn2, mask, num_samples=0)
