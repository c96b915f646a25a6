"""EMA arithmetic, the momentum encoder's copy and dropout, and the FIFO queue."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from torch import nn

from embedkit.encode.torch_backend import load_backbone
from embedkit.training.momentum import EmbeddingQueue, MomentumEncoder, ema_update


class Tiny(nn.Module):
    def __init__(self, weight: list[list[float]], bias: list[float], counter: float) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor(weight))
            self.linear.bias.copy_(torch.tensor(bias))
        self.register_buffer("counter", torch.tensor([counter]))


def test_ema_update_by_hand() -> None:
    target = Tiny([[1.0, 2.0], [3.0, 4.0]], [0.0, 10.0], counter=1.0)
    online = Tiny([[3.0, 2.0], [-1.0, 0.0]], [10.0, 0.0], counter=7.0)
    ema_update(target, online, decay=0.9)
    # 0.9 * t + 0.1 * o, entry by entry
    torch.testing.assert_close(target.linear.weight, torch.tensor([[1.2, 2.0], [2.6, 3.6]]))
    torch.testing.assert_close(target.linear.bias, torch.tensor([1.0, 9.0]))
    assert target.counter.item() == 7.0  # buffers are copied
    torch.testing.assert_close(online.linear.weight, torch.tensor([[3.0, 2.0], [-1.0, 0.0]]))  # untouched
    ema_update(target, online, decay=0.9)
    torch.testing.assert_close(target.linear.bias, torch.tensor([0.9 * 1.0 + 1.0, 0.9 * 9.0]))


def test_ema_update_rejects_mismatch() -> None:
    with pytest.raises(ValueError, match="same parameters"):
        ema_update(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="has shape"):
        ema_update(nn.Linear(2, 2), nn.Linear(3, 2))
    with pytest.raises(ValueError, match="decay must lie in"):
        ema_update(nn.Linear(2, 2), nn.Linear(2, 2), decay=1.5)


def inputs(model: nn.Module, batch: int = 8, length: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token ids (no padding) within the model's vocabulary."""
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, model.config.vocab_size, (batch, length), generator=g),
        "attention_mask": torch.ones(batch, length, dtype=torch.long),
    }


def test_momentum_encoder_starts_equal_and_is_a_copy(tiny_bert: Path) -> None:
    online = load_backbone(tiny_bert)
    momentum = MomentumEncoder(online, decay=0.5, dropout=0.3)
    online_params = dict(online.named_parameters())
    for name, p in momentum.encoder.named_parameters():
        assert torch.equal(p, online_params[name])
        assert p.data_ptr() != online_params[name].data_ptr()
        assert not p.requires_grad
    assert all(p.requires_grad for p in online.parameters())
    with torch.no_grad():
        online.embeddings.word_embeddings.weight.add_(1.0)
    assert not torch.equal(
        momentum.encoder.embeddings.word_embeddings.weight, online.embeddings.word_embeddings.weight
    )
    before = momentum.encoder.embeddings.word_embeddings.weight.clone()
    momentum.update(online)
    torch.testing.assert_close(
        momentum.encoder.embeddings.word_embeddings.weight,
        0.5 * before + 0.5 * online.embeddings.word_embeddings.weight,
    )


def test_momentum_dropout_is_set_on_the_copy_only(tiny_bert: Path) -> None:
    online = load_backbone(tiny_bert)
    momentum = MomentumEncoder(online, dropout=0.3)
    copies = [m for m in momentum.encoder.modules() if isinstance(m, nn.Dropout)]
    assert copies and all(m.p == 0.3 for m in copies)
    assert all(m.p == 0.1 for m in online.modules() if isinstance(m, nn.Dropout))
    attention = momentum.encoder.encoder.layer[0].attention.self
    assert attention.dropout.p == 0.3  # what BERT's eager and SDPA attention read while training
    assert momentum.encoder.config.attention_probs_dropout_prob == 0.3
    assert online.config.attention_probs_dropout_prob == 0.1


def test_momentum_attention_dropout_rate_is_in_effect(tiny_bert: Path) -> None:
    online = load_backbone(tiny_bert, attn_implementation="eager")
    momentum = MomentumEncoder(online, dropout=0.3)
    with torch.no_grad():
        out = momentum.encoder(**inputs(online, batch=16, length=16), output_attentions=True)
    probs = torch.stack(out.attentions)  # (L, B, H, T, T), no padding: softmax entries are > 0
    zero_fraction = (probs == 0).double().mean().item()
    assert zero_fraction == pytest.approx(0.3, abs=0.02)


def test_momentum_hidden_dropout_rate_is_in_effect(tiny_bert: Path) -> None:
    momentum = MomentumEncoder(load_backbone(tiny_bert), dropout=0.3)
    seen: list[torch.Tensor] = []
    handle = momentum.encoder.embeddings.dropout.register_forward_hook(lambda m, i, o: seen.append(o))
    momentum(**inputs(momentum.encoder, batch=16, length=16))
    handle.remove()
    assert (seen[0] == 0).double().mean().item() == pytest.approx(0.3, abs=0.03)


def test_momentum_sdpa_attention_gets_the_dropout(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    momentum = MomentumEncoder(load_backbone(tiny_bert, attn_implementation="sdpa"), dropout=0.3)
    real = torch.nn.functional.scaled_dot_product_attention
    seen: list[float] = []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("dropout_p", 0.0))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    momentum(**inputs(momentum.encoder))
    assert seen and all(p == 0.3 for p in seen)


def test_momentum_forward_is_stochastic_without_grad_and_stays_training(tiny_bert: Path) -> None:
    online = load_backbone(tiny_bert)
    parent = nn.ModuleDict({"online": online, "momentum": MomentumEncoder(online, dropout=0.3)})
    parent.eval()
    momentum = parent["momentum"]
    assert momentum.encoder.training and not online.training
    batch = inputs(online)
    first, second = momentum(**batch), momentum(**batch)
    assert first.shape == (8, 16, 32)
    assert not first.requires_grad
    assert not torch.allclose(first, second)


def test_momentum_encoder_distilbert(tiny_bert_no_types: Path) -> None:
    online = load_backbone(tiny_bert_no_types)
    momentum = MomentumEncoder(online, dropout=0.3)
    assert all(m.p == 0.3 for m in momentum.encoder.modules() if isinstance(m, nn.Dropout))
    assert momentum.encoder.config.attention_dropout == 0.3
    assert momentum(**inputs(online, batch=2, length=5)).shape == (2, 5, 32)


def test_queue_fifo_order() -> None:
    queue = EmbeddingQueue(dim=2, size=5)
    assert queue.keys().shape == (0, 2)

    def rows(start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n, dtype=torch.float32)[:, None].repeat(1, 2)

    queue.enqueue(rows(0, 2))
    assert queue.keys()[:, 0].tolist() == [0, 1]
    queue.enqueue(rows(2, 2))
    assert queue.keys()[:, 0].tolist() == [0, 1, 2, 3]
    queue.enqueue(rows(4, 3))  # 7 keys into 5 slots: 0 and 1 drop out
    assert queue.keys()[:, 0].tolist() == [2, 3, 4, 5, 6]
    queue.enqueue(rows(7, 1))
    assert queue.keys()[:, 0].tolist() == [3, 4, 5, 6, 7]
    queue.enqueue(rows(10, 8))  # a batch larger than the queue keeps its newest rows
    assert queue.keys()[:, 0].tolist() == [13, 14, 15, 16, 17]
    assert len(queue) == 5


def test_queue_detaches_and_follows_keys() -> None:
    queue = EmbeddingQueue(dim=3, size=4)
    keys = torch.randn(2, 3, requires_grad=True)
    queue.enqueue(keys.to(torch.bfloat16))
    assert not queue.keys().requires_grad
    assert queue.keys().dtype == torch.float32 and queue.keys().device == keys.device
    with pytest.raises(ValueError, match="queue keys must be \\(B, 3\\)"):
        queue.enqueue(torch.randn(2, 4))


def test_queue_state_round_trip_with_weights_only_load() -> None:
    queue = EmbeddingQueue(dim=2, size=3)
    for start in range(4):
        queue.enqueue(torch.full((1, 2), float(start)))
    buffer = io.BytesIO()
    torch.save(queue.state_dict(), buffer)
    buffer.seek(0)
    restored = EmbeddingQueue(dim=2, size=3)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(restored.keys(), queue.keys())
    restored.enqueue(torch.full((1, 2), 9.0))
    assert restored.keys()[:, 0].tolist() == [2, 3, 9]
    with pytest.raises(ValueError, match="saved queue is size 3 x dim 2"):
        EmbeddingQueue(dim=2, size=4).load_state_dict(queue.state_dict())


def test_momentum_update_matches_a_per_parameter_loop_over_steps(tiny_bert: Path) -> None:
    """The kept tensor lists see the online weights change in place (optimizer steps, a checkpoint
    load), and a fresh online module is matched anew."""
    online = load_backbone(tiny_bert)
    momentum = MomentumEncoder(online, decay=0.9, dropout=0.0)
    reference = {n: p.detach().clone() for n, p in momentum.encoder.named_parameters()}
    optimizer = torch.optim.SGD(online.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        online(**inputs(online, batch=2, length=5, seed=step)).last_hidden_state.square().mean().backward()
        optimizer.step()
        if step == 1:
            online.load_state_dict({k: v + 0.01 for k, v in online.state_dict().items()})
        momentum.update(online)
        for name, p in online.named_parameters():  # t = 0.9 t + 0.1 o, one parameter at a time
            reference[name] = 0.9 * reference[name] + 0.1 * p.detach()
    for name, p in momentum.encoder.named_parameters():
        torch.testing.assert_close(p, reference[name], rtol=1e-6, atol=1e-7)
    other = load_backbone(tiny_bert)
    with torch.no_grad():
        other.embeddings.word_embeddings.weight.fill_(1.0)
        other.embeddings.position_ids.fill_(0)
    before = momentum.encoder.embeddings.word_embeddings.weight.clone()
    momentum.update(other)
    torch.testing.assert_close(momentum.encoder.embeddings.word_embeddings.weight, 0.9 * before + 0.1)
    assert int(momentum.encoder.embeddings.position_ids.abs().sum()) == 0  # buffers are copied


def test_momentum_update_of_another_dtype_converts(tiny_bert: Path) -> None:
    online = load_backbone(tiny_bert)
    momentum = MomentumEncoder(online, decay=0.5, dropout=0.0)
    before = momentum.encoder.embeddings.word_embeddings.weight.clone()
    half = load_backbone(tiny_bert).to(torch.bfloat16)
    momentum.update(half)
    expected = 0.5 * before + 0.5 * half.embeddings.word_embeddings.weight.float()
    torch.testing.assert_close(momentum.encoder.embeddings.word_embeddings.weight, expected)
    assert momentum.encoder.embeddings.word_embeddings.weight.dtype == torch.float32
