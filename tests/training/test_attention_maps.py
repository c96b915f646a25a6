"""AMI's maps from its own layers, the fused kernel elsewhere: the AMI term and the whole loss equal
the all-eager computation they replace, and the maps are the layers' own attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_bert
from training_runs import CORPUS, config

from embedkit.encode.batching import TokenBatcher
from embedkit.encode.torch_backend import load_backbone
from embedkit.encode.torch_head import pool
from embedkit.training import ami, losses
from embedkit.training.attention_maps import FUSED_ATTENTION, MAPS_ATTENTION, attention_modules
from embedkit.training.batches import pad_batch
from embedkit.training.model import ContrastiveModel

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(base: Path) -> dict[str, torch.Tensor]:
    batcher = TokenBatcher(base, 32)
    rows = np.arange(6)
    return pad_batch(batcher.tokenizer.encode_batch(CORPUS[3:9]), rows, batcher.pad_id, torch.device("cpu"))


def _all_eager_terms(
    base: Path, model: ContrastiveModel, batch: dict[str, torch.Tensor], seed: int
) -> dict[str, torch.Tensor]:
    """The step as it was computed before: a whole eager backbone returning every layer's maps,
    InfoNCE of the two views after the head, AMI of the default layers."""
    eager = load_backbone(base, attn_implementation="eager").double().train()
    eager.load_state_dict(model.backbone.state_dict())
    doubled = {k: torch.cat([v, v]) for k, v in batch.items()}
    torch.manual_seed(seed)
    out = eager(**doubled, output_attentions=True)
    size = batch["input_ids"].shape[0]
    views = model.head(pool(out.last_hidden_state, doubled["attention_mask"], model.pooling))
    info_nce = losses.info_nce(views[:size], views[size:], temperature=model.config.temperature)
    total, count = ami.ami_sum_and_count(
        [a[:size] for a in out.attentions],
        [a[size:] for a in out.attentions],
        batch["attention_mask"],
        weight=model.config.ami_weight,
        layers=ami.ami_layers(len(out.attentions)),
        num_samples=model.config.ami_samples,
        generator=torch.Generator().manual_seed(seed),
    )
    return {"info_nce": info_nce, "ami": total / count.clamp(min=1.0)}


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_ami_and_the_loss_equal_the_all_eager_step(tmp_path: Path, dropout: float) -> None:
    # float64, the same seed: on the CPU SDPA's kernel draws attention dropout as eager attention does
    base = make_tiny_bert(tmp_path / "bert", dropout=dropout)
    cfg = config(base, method="ami-simcse", ami_weight=0.5)
    model = ContrastiveModel.from_folder(base, cfg).double().train()
    batch = _batch(base)
    expected = _all_eager_terms(base, model, batch, seed=3)
    torch.manual_seed(3)
    out = model.step(batch, torch.Generator().manual_seed(3))
    assert set(out.terms) == {"info_nce", "ami"}
    assert out.terms["ami"].item() < -1e-4  # a term that can tell a difference
    for name, value in expected.items():
        assert out.terms[name].item() == pytest.approx(value.item(), abs=1e-5), name
    assert out.total.item() == pytest.approx(sum(v.item() for v in expected.values()), abs=1e-5)


def test_the_maps_are_the_layers_own_attention_after_dropout(tmp_path: Path) -> None:
    p = 0.3
    base = make_tiny_bert(tmp_path / "bert", dropout=p)
    model = ContrastiveModel.from_folder(base, config(base, method="ami-simcse")).train()
    modules = attention_modules(model.backbone)
    layer = model.ami_layers[-1]
    projections: dict[str, torch.Tensor] = {}
    module = modules[layer]
    for name in ("query", "key"):  # the layer's own projections, as it computed them
        getattr(module, name).register_forward_hook(
            lambda _m, _a, out, name=name: projections.__setitem__(name, out.detach())
        )
    batch = _batch(base)
    model.backbone(**model.model_inputs(batch))
    maps = model.attention_maps.take()[-1].detach()  # (B, H, T, T)
    b, t = batch["input_ids"].shape
    heads = model.backbone.config.num_attention_heads
    q, k = (projections[n].view(b, t, heads, -1).transpose(1, 2) for n in ("query", "key"))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(batch["attention_mask"][:, None, None, :] == 0, float("-inf"))
    expected = scores.softmax(-1)
    kept = maps > 0
    assert 0.5 < kept[expected > 0].float().mean() < 0.9  # about 1 - p of the entries survive dropout
    torch.testing.assert_close(maps[kept] * (1 - p), expected[kept], rtol=1e-5, atol=1e-6)


def test_only_the_ami_layers_leave_the_fused_kernel(tiny_bert: Path) -> None:
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse"))
    kinds = [m.config._attn_implementation for m in attention_modules(model.backbone)]
    assert kinds == [FUSED_ATTENTION, FUSED_ATTENTION, MAPS_ATTENTION, MAPS_ATTENTION]  # layers 2, 3 of 4
    momentum = [m.config._attn_implementation for m in attention_modules(model.momentum.encoder)]
    assert momentum == [FUSED_ATTENTION] * 4
    simcse = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="simcse"))
    assert simcse.attention_maps is None
    assert {m.config._attn_implementation for m in attention_modules(simcse.backbone)} == {FUSED_ATTENTION}
    eager = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, attn_implementation="eager"))
    kinds = [m.config._attn_implementation for m in attention_modules(eager.backbone)]
    assert kinds == ["eager", "eager", MAPS_ATTENTION, MAPS_ATTENTION]
