"""InfoCSE's auxiliary MLM term (training/infocse.py, training/aux_stage1.py) on tiny random BERTs.

Each property is checked against an independent computation: the gradient path by the chain rule
through a detached copy of the sentence vector, the loss by a numpy cross-entropy over all
positions restricted to the masked ones, the masking by its frequencies on a large sample.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import make_tiny_bert

from embedkit.encode.batching import TokenBatcher
from embedkit.encode.torch_head import pool
from embedkit.training import checkpoint as ckpt
from embedkit.training.batches import pad_batch
from embedkit.training.config import INFOCSE_WEIGHT, TrainConfig
from embedkit.training.infocse import IGNORE, mask_tokens, prediction_slots, special_token_ids
from embedkit.training.model import ContrastiveModel
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = [" ".join(["wing flow air pressure"] * n) + f" {n}" for n in range(1, 13)]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(cache))
    return cache


def config(base: Path, **changes: object) -> TrainConfig:
    defaults = {
        "base_model": str(base),
        "method": "infocse",
        "batch_size": 4,
        "epochs": 100,
        "max_steps": 3,
        "aux_stage1_steps": 3,
        "device": "cpu",
    }
    return TrainConfig(**{**defaults, **changes})  # type: ignore[arg-type]


def batch_of(base: Path, sentences: list[str]) -> dict[str, torch.Tensor]:
    batcher = TokenBatcher(base, 32)
    encodings = batcher.tokenizer.encode_batch(sentences)
    return pad_batch(encodings, np.arange(len(sentences)), batcher.pad_id, torch.device("cpu"))


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def stage1_source(folder: Path) -> dict:
    return json.loads((folder / "embedkit.json").read_text())["training"]["aux_stage1"]


# --- the network and its gradient path -------------------------------------------------------------


def test_config_defaults_and_switches() -> None:
    assert TrainConfig(method="infocse").aux_weight == INFOCSE_WEIGHT == 1e-5
    assert not TrainConfig(method="micse").uses_aux
    micse_aux = TrainConfig(method="micse").with_overrides(["aux_mlm_weight=1e-5"])
    assert micse_aux.uses_aux and micse_aux.uses_queue and micse_aux.uses_ami
    zero = TrainConfig(method="infocse", aux_mlm_weight=0.0)
    assert zero.uses_aux and zero.aux_weight == 0.0  # computed, weighted 0
    from embedkit.errors import InputError

    with pytest.raises(InputError, match="aux_mask_rate"):
        TrainConfig(aux_mask_rate=1.0).validate()


def test_mlm_gradient_reaches_the_encoder_only_through_the_sentence_vector(tiny_bert: Path) -> None:
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert))
    aux = model.aux
    assert aux.lower == 2 and len(aux.layers) == 2  # half of the tiny BERT's 4 layers, + 2
    model.eval()  # no dropout: the reference sees the same network
    inputs = model.model_inputs(batch_of(tiny_bert, CORPUS[:4]))
    encoder = [p for p in model.backbone.parameters()]
    frozen_ptrs = {p.data_ptr() for p in aux.frozen.parameters()}
    assert not frozen_ptrs & {p.data_ptr() for p in encoder}  # a copy, not the encoder's own layers

    aux.generator = torch.Generator().manual_seed(7)
    sentence = pool(model.backbone(**inputs).last_hidden_state, inputs["attention_mask"], "mean")
    loss = aux(sentence, inputs)
    actual = torch.autograd.grad(loss, encoder, retain_graph=True, allow_unused=True)

    # Reference: d loss / d sentence on a detached leaf, then the chain rule by hand.
    aux.generator = torch.Generator().manual_seed(7)  # the same mask
    leaf = sentence.detach().clone().requires_grad_(True)
    (d_sentence,) = torch.autograd.grad(aux(leaf, inputs), leaf)
    expected = torch.autograd.grad(
        sentence, encoder, grad_outputs=d_sentence, retain_graph=True, allow_unused=True
    )
    assert d_sentence.abs().sum() > 0
    nonzero = 0
    for a, e in zip(actual, expected, strict=True):
        a = torch.zeros(()) if a is None else a
        e = torch.zeros(()) if e is None else e
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-9)
        nonzero += int(bool(e.abs().sum() > 0))
    assert nonzero > 10  # the term does reach the encoder

    loss.backward()
    assert all(p.grad is None and not p.requires_grad for p in aux.frozen.parameters())
    assert all(p.grad is not None for p in aux.layers.parameters())


def test_step_feeds_the_pooled_vectors_before_the_head(tiny_bert: Path) -> None:
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, aux_mlm_weight=0.5))
    model.eval()
    batch = batch_of(tiny_bert, CORPUS[:4])
    model.aux.generator = torch.Generator().manual_seed(3)
    term = model.step(batch, None).terms["aux_mlm"]
    doubled = {k: torch.cat([v, v]) for k, v in model.model_inputs(batch).items()}
    model.aux.generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        vectors = pool(model.backbone(**doubled).last_hidden_state, doubled["attention_mask"], "mean")
        expected = 0.5 * model.aux(vectors, doubled)
    torch.testing.assert_close(term, expected, rtol=1e-6, atol=1e-7)


def test_mlm_loss_is_a_cross_entropy_over_the_masked_positions_only(tiny_bert: Path) -> None:
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert))
    aux = model.aux.eval()
    inputs = model.model_inputs(batch_of(tiny_bert, CORPUS[3:9]))
    aux.generator = torch.Generator().manual_seed(1)
    masked, labels = aux.mask(inputs)
    assert 0 < int((labels != IGNORE).sum()) < int(inputs["attention_mask"].sum())
    features = aux.features({**inputs, "input_ids": masked})
    sentence = torch.randn(len(masked), features.shape[-1])
    seen: list[torch.Tensor] = []
    hook = aux.layers[-1].register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        loss = aux.loss(sentence, features, inputs["attention_mask"], labels).item()
    hook.remove()

    # numpy: BERT's head at every position (decoder = word embeddings), log-softmax, masked mean
    hidden = (seen[0][0] if isinstance(seen[0], tuple) else seen[0]).numpy().astype(np.float64)
    dense = aux.dense.weight.detach().numpy().astype(np.float64)
    h = hidden @ dense.T + aux.dense.bias.detach().numpy()
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))  # exact gelu
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + aux.norm.eps)
    h = h * aux.norm.weight.detach().numpy() + aux.norm.bias.detach().numpy()
    embeddings = model.backbone.embeddings.word_embeddings.weight.detach().numpy()  # base = frozen copy
    logits = h @ embeddings.T + aux.bias.detach().numpy()
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    y = labels.numpy()
    picked = [-logp[b, t, y[b, t]] for b in range(y.shape[0]) for t in range(y.shape[1]) if y[b, t] != IGNORE]
    assert loss == pytest.approx(float(np.mean(picked)), rel=1e-5)


def test_masking_statistics_and_never_special_or_padding(tiny_bert: Path) -> None:
    special, mask_id = special_token_ids(tiny_bert)
    rate = TrainConfig().aux_mask_rate
    rng = np.random.default_rng(0)
    rows, width, vocab = 3000, 30, 200
    ids = rng.integers(10, vocab, size=(rows, width))
    lengths = rng.integers(3, width + 1, size=rows)
    attention = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = special[0]
    ids[np.arange(rows), lengths - 1] = special[-1]
    ids[attention == 0] = 0  # padding
    ids_t = torch.from_numpy(ids)
    masked, labels = mask_tokens(
        ids_t,
        torch.from_numpy(attention),
        torch.tensor(special),
        mask_id,
        vocab,
        rate,
        torch.Generator().manual_seed(0),
    )
    masked, labels = masked.numpy(), labels.numpy()
    candidate = (attention == 1) & ~np.isin(ids, special)
    picked = labels != IGNORE
    assert not picked[~candidate].any()  # special tokens and padding: never picked ...
    assert (masked[~candidate] == ids[~candidate]).all()  # ... nor changed
    assert (labels[picked] == ids[picked]).all()
    assert (masked[~picked] == ids[~picked]).all()  # unpicked tokens stay

    n = int(candidate.sum())
    share = picked.sum() / n
    assert abs(share - rate) < 5 * math.sqrt(rate * (1 - rate) / n)
    m = int(picked.sum())
    to_mask = (masked[picked] == mask_id).mean()
    kept = (masked[picked] == ids[picked]).mean()
    random = 1 - to_mask - kept
    for observed, p in ((to_mask, 0.8), (random, 0.1 * (1 - 2 / vocab)), (kept, 0.1 * (1 + 1 / vocab))):
        assert abs(observed - p) < 5 * math.sqrt(p * (1 - p) / m), (observed, p)


# --- the runs -------------------------------------------------------------------------------------


def test_zero_weight_gives_exactly_the_simcse_weights(tmp_path: Path, tiny_bert: Path) -> None:
    simcse = train(CORPUS, tmp_path / "simcse", config(tiny_bert, method="simcse"), progress=False)
    zero = train(CORPUS, tmp_path / "zero", config(tiny_bert, aux_mlm_weight=0.0), progress=False)
    train(CORPUS, tmp_path / "one", config(tiny_bert, aux_mlm_weight=1.0), progress=False)
    assert simcse.steps == zero.steps == 3 and "aux_mlm" in zero.final_losses  # computed, weighted 0
    reference = weights(tmp_path / "simcse")
    for folder in ("zero", "one"):
        assert set(weights(tmp_path / folder)) == set(reference)  # the folder is the encoder alone
    # Weighted 0, the MLM term adds exact zeros to the gradients; only the order of float sums may
    # differ (1 ulp, under 1e-8 here). A leak (its dropout or masking drawn from the run's RNG)
    # changes every weight by the size of a training step, as weight 1 does (about 1e-6 here).
    for name, tensor in weights(tmp_path / "zero").items():
        torch.testing.assert_close(tensor, reference[name], rtol=0, atol=2e-8, msg=name)
    moved = max((t - reference[k]).abs().max().item() for k, t in weights(tmp_path / "one").items())
    assert moved > 2e-7


def test_stage1_is_cached_by_base_and_data(tmp_path: Path, tiny_bert: Path, own_cache: Path) -> None:
    cfg = config(tiny_bert, aux_mlm_weight=1.0)
    train(CORPUS, tmp_path / "a", cfg, progress=False)
    first = stage1_source(tmp_path / "a")
    assert first["source"] == "trained"
    train(CORPUS, tmp_path / "b", cfg.replace(seed=5), progress=False)  # another training seed
    assert stage1_source(tmp_path / "b") == {"source": "cache", "key": first["key"]}
    # the same seed again: the cached stage 1 gives the same run as the trained one
    train(CORPUS, tmp_path / "a2", cfg, progress=False)
    assert stage1_source(tmp_path / "a2")["source"] == "cache"
    for name, tensor in weights(tmp_path / "a2").items():
        assert torch.equal(tensor, weights(tmp_path / "a")[name]), name

    train(CORPUS[:-1], tmp_path / "c", cfg, progress=False)  # other data
    assert stage1_source(tmp_path / "c")["source"] == "trained"
    other_base = make_tiny_bert(tmp_path / "other-base", seed=1)
    train(CORPUS, tmp_path / "d", cfg.replace(base_model=str(other_base)), progress=False)
    assert stage1_source(tmp_path / "d")["source"] == "trained"
    folders = sorted(p.name for p in (own_cache / "infocse-stage1").iterdir())
    assert len(folders) == 3 and all(not name.startswith(".") for name in folders)

    reuse = cfg.replace(aux_from=str(own_cache / "infocse-stage1" / first["key"]))
    train(CORPUS, tmp_path / "e", reuse, progress=False)
    assert stage1_source(tmp_path / "e")["source"].endswith(first["key"])
    for name, tensor in weights(tmp_path / "e").items():
        assert torch.equal(tensor, weights(tmp_path / "a")[name]), name


@pytest.mark.parametrize("method", ["infocse", "micse"])
def test_resume_restores_the_auxiliary_network(tmp_path: Path, tiny_bert: Path, method: str) -> None:
    cfg = config(
        tiny_bert,
        method=method,
        aux_mlm_weight=1.0,
        max_steps=5,
        save_steps=2,
        learning_rate=1e-3,
        queue_size=6,
    )
    whole = train(CORPUS, tmp_path / "whole", cfg, progress=False)

    class Killed(Exception):
        pass

    def kill(step: int, _terms: dict[str, float]) -> None:
        if step == 3:
            raise Killed

    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(CORPUS, run, cfg, progress=False, on_step=kill)
    checkpoint = ckpt.latest_checkpoint(run)
    saved = weights(checkpoint)
    assert any(k.startswith("aux.layers.") for k in saved)
    optimizer_state = torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]
    model = ContrastiveModel.from_folder(tiny_bert, cfg)
    # every trainable parameter but BERT's unused pooler has AdamW moments, the auxiliary network's too
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and ".pooler." not in n]
    assert sum(n.startswith("aux.") for n in trainable) > 0
    assert len(optimizer_state) == len(trainable)

    resumed = train(CORPUS, run, cfg, progress=False, resume=True)
    assert resumed.final_losses == whole.final_losses  # aux_mlm included: same weights, masks, moments
    expected = weights(tmp_path / "whole")
    for name, tensor in weights(run).items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6)


def test_the_head_predicts_a_fixed_number_of_slots_above_any_likely_masking() -> None:
    # mean + 6 standard deviations of Binomial(N, rate), + 8: 56 x 0.4 = 22.4, sd 3.67 -> 45 + 8
    assert prediction_slots(56, 0.4) == 53
    assert prediction_slots(4096, 0.4) == 1827 + 8  # 1638.4 + 6 x 31.35, a 0.45 share
    assert prediction_slots(10, 0.4) == 10  # never more than the tokens
