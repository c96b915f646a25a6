"""Matryoshka training: the prefix loss against a float64 reference, its settings, and whole runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from training_runs import CORPUS, Killed, config, kill_after, weights

from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError
from embedkit.training import checkpoint as ckpt
from embedkit.training.config import TrainConfig
from embedkit.training.losses import info_nce, matryoshka_info_nce, matryoshka_similarity
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_matryoshka(
    e1: torch.Tensor,
    e2: torch.Tensor,
    queue: torch.Tensor | None,
    dims: list[int],
    weights: list[float],
    tau: float,
) -> list[float]:
    """Per size m, in float64 loops: truncate to m, divide by the prefix's own norm, then InfoNCE as
    -log softmax of the positive's similarity among the other view's rows and the queue's."""

    def unit_prefix(rows: list[list[float]], m: int) -> list[list[float]]:
        out = []
        for row in rows:
            norm = math.sqrt(sum(x * x for x in row[:m]))
            out.append([x / norm for x in row[:m]])
        return out

    a_all, p_all = e1.detach().double().tolist(), e2.detach().double().tolist()
    q_all = [] if queue is None else queue.double().tolist()
    terms = []
    for m, weight in zip(dims, weights, strict=True):
        anchors, keys = unit_prefix(a_all, m), unit_prefix(p_all, m) + unit_prefix(q_all, m)
        total = 0.0
        for i, anchor in enumerate(anchors):
            logits = [sum(x * y for x, y in zip(anchor, key, strict=True)) / tau for key in keys]
            top = max(logits)
            total += top + math.log(sum(math.exp(v - top) for v in logits)) - logits[i]
        terms.append(weight * total / len(anchors))
    return terms


def views(seed: int, b: int = 6, d: int = 12, q: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g), torch.randn(b, d, generator=g), torch.randn(q, d, generator=g)


# --- the loss ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_queue", [True, False])
def test_loss_matches_a_reference_over_renormalized_prefixes(with_queue: bool) -> None:
    e1, e2, queue = views(0)
    # scaled rows: a prefix's norm differs from the whole row's, so a missing renormalization shows
    e1 = e1 * torch.linspace(0.5, 3.0, 12)
    queue = queue if with_queue else None
    dims, weights = [12, 6, 3, 1], [1.0, 0.5, 2.0, 1.0]
    terms = matryoshka_info_nce(e1, e2, dims, weights, queue, temperature=0.1)
    assert terms.shape == (4,) and terms.dtype == torch.float32
    expected = reference_matryoshka(e1, e2, queue, dims, weights, 0.1)
    assert terms.tolist() == pytest.approx(expected, rel=1e-5)


def test_loss_at_the_whole_vector_alone_is_info_nce() -> None:
    e1, e2, queue = views(1)
    only = matryoshka_info_nce(e1, e2, [12], [1.0], queue)
    assert only.item() == pytest.approx(info_nce(e1, e2, queue).item(), rel=1e-6)


def test_gradient_flows_to_each_prefix_and_not_to_the_queue() -> None:
    e1, e2, queue = (t.requires_grad_() for t in views(2))
    matryoshka_info_nce(e1, e2, [3], [1.0], queue).sum().backward()
    # a 3-dimension prefix reaches only the first 3 dimensions of both views
    assert e1.grad[:, :3].abs().sum() > 0 and e2.grad[:, :3].abs().sum() > 0
    assert e1.grad[:, 3:].abs().sum() == 0 and e2.grad[:, 3:].abs().sum() == 0
    assert queue.grad is None
    e1.grad = None
    matryoshka_info_nce(e1, e2, [12, 3], [1.0, 1.0], queue).sum().backward()
    assert e1.grad[:, 3:].abs().sum() > 0


def test_loss_is_float32_under_autocast() -> None:
    e1, e2, queue = views(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        terms = matryoshka_info_nce(e1, e2, [12, 4], [1.0, 1.0], queue)
    assert terms.dtype == torch.float32
    assert terms.tolist() == pytest.approx(
        reference_matryoshka(e1, e2, queue, [12, 4], [1, 1], 0.05), rel=1e-5
    )


@pytest.mark.parametrize(
    ("dims", "weights", "message"),
    [([12, 6], [1.0], "one weight per size"), ([], [], "one weight per size"), ([13], [1.0], r"in 1\.\.12")],
)
def test_loss_refuses_bad_sizes(dims: list[int], weights: list[float], message: str) -> None:
    e1, e2, _ = views(4)
    with pytest.raises(ValueError, match=message):
        matryoshka_info_nce(e1, e2, dims, weights)


# --- the settings -----------------------------------------------------------------------------------


def test_settings_parse_order_and_round_trip() -> None:
    cfg = (
        TrainConfig().with_overrides(["matryoshka_dims=64,384,128", "matryoshka_weights=1,2,0.5"]).validate()
    )
    assert cfg.matryoshka_dims == (64, 384, 128) and cfg.matryoshka_weights == (1.0, 2.0, 0.5)
    # any order; the weights stay with their sizes
    assert cfg.matryoshka == ((384, 128, 64), (2.0, 0.5, 1.0))
    # by default the whole vector's term alone: the prefixes are not trained
    assert TrainConfig(matryoshka_dims=(64, 384)).matryoshka == ((384, 64), (1.0, 0.0))
    assert not TrainConfig(matryoshka_dims=(64, 384)).trains_prefixes
    assert TrainConfig(matryoshka_dims=(64, 384), matryoshka_similarity=0.5).trains_prefixes
    assert TrainConfig(matryoshka_dims=(64, 384), matryoshka_weights=(0.5, 1.0)).trains_prefixes
    assert not TrainConfig(matryoshka_dims=(384,), matryoshka_similarity=0.5).trains_prefixes
    assert TrainConfig().matryoshka == ((), ())
    saved = json.loads(json.dumps(cfg.to_dict()))
    assert saved["matryoshka_dims"] == [64, 384, 128]
    assert TrainConfig.from_dict(saved) == cfg.replace(queue_size=384)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"matryoshka_dims": (384, 0)}, "matryoshka_dims must be sizes of at least 1"),
        ({"matryoshka_dims": ()}, "matryoshka_dims must be sizes of at least 1"),
        ({"matryoshka_dims": (384, 128, 128)}, "lists a size twice: 384,128,128"),
        ({"matryoshka_weights": (1.0,)}, "matryoshka_weights needs matryoshka_dims"),
        ({"matryoshka_dims": (384, 128), "matryoshka_weights": (1.0,)}, "one weight per size .*got 1"),
        ({"matryoshka_dims": (384, 128), "matryoshka_weights": (1.0, -1.0)}, "finite numbers of at least 0"),
        ({"matryoshka_dims": (384, 128), "matryoshka_weights": (1.0, math.nan)}, "numbers of at least 0"),
        ({"matryoshka_dims": (128, 384), "matryoshka_weights": (1.0, 0.0)}, r"whole vector's \(384\) must"),
        ({"matryoshka_dims": (384, 128), "matryoshka_rotation_docs": 0}, "leaves the prefixes as they are"),
        ({"matryoshka_similarity": -0.5}, "matryoshka_similarity must be a finite number of at least 0"),
        ({"matryoshka_similarity": math.inf}, "matryoshka_similarity must be a finite number of at least 0"),
    ],
)
def test_bad_settings_name_the_field(changes: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        TrainConfig(**changes).validate()


def test_sizes_must_fit_and_include_the_model_dimension() -> None:
    TrainConfig(matryoshka_dims=(384, 128)).check_matryoshka(384)
    with pytest.raises(InputError, match="matryoshka_dims 512: larger than the base model's 384 dimensions"):
        TrainConfig(matryoshka_dims=(512, 384)).check_matryoshka(384)
    with pytest.raises(InputError, match="must include 384, the base model's dimension.*e.g. 384,256,64"):
        TrainConfig(matryoshka_dims=(256, 64)).check_matryoshka(384)
    with pytest.raises(InputError, match="comma-separated list of ints"):
        TrainConfig().with_overrides(["matryoshka_dims=384,x"])


# --- the similarity-preserving term -------------------------------------------------------------------


def test_similarity_term_by_hand() -> None:
    """Anchor (1,0,1,0) and key (1,0,0,1): cosine 1/2 whole, 1 over the first two dimensions, so the
    2-d term is |1 - 1/2| = 0.5 times its weight; over the first three, (1,0,1)·(1,0,0) = 1/sqrt(2)."""
    e1, keys = torch.tensor([[1.0, 0.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    terms = matryoshka_similarity(e1, keys, dims=[4, 3, 2], weights=[9.0, 1.0, 2.0])
    assert terms.tolist() == pytest.approx([abs(1 / math.sqrt(2) - 0.5), 2 * 0.5])


def test_similarity_term_is_zero_where_the_prefix_holds_the_whole_vector() -> None:
    e1, keys = torch.randn(6, 8), torch.randn(10, 8)
    e1[:, 4:], keys[:, 4:] = 0.0, 0.0  # nothing beyond the first 4 dimensions: the same cosines
    assert matryoshka_similarity(e1, keys, dims=[8, 4], weights=[1.0, 1.0]).item() == pytest.approx(
        0.0, abs=1e-6
    )


def test_similarity_term_moves_the_prefixes_never_the_reference() -> None:
    """The whole vector is detached as reference: no gradient reaches the dimensions beyond the
    largest smaller prefix, which only the reference sees."""
    e1, keys = torch.randn(5, 16, requires_grad=True), torch.randn(7, 16, requires_grad=True)
    matryoshka_similarity(e1, keys, dims=[16, 8, 4], weights=[1.0, 1.0, 1.0]).sum().backward()
    for grad in (e1.grad, keys.grad):
        assert grad is not None and grad[:, :8].abs().sum() > 0
        assert torch.equal(grad[:, 8:], torch.zeros_like(grad[:, 8:]))


def test_similarity_term_refuses_sizes_out_of_order() -> None:
    with pytest.raises(ValueError, match="largest first"):
        matryoshka_similarity(torch.randn(2, 8), torch.randn(3, 8), dims=[4, 8], weights=[1.0, 1.0])


def test_by_default_a_run_has_no_similarity_term(tmp_path: Path, tiny_bert: Path) -> None:
    assert TrainConfig().matryoshka_similarity == 0.0  # the MRL paper's loss, InfoNCE alone
    cfg = mrl_config(tiny_bert, matryoshka_weights=(1.0, 1.0, 1.0))
    result = train(CORPUS, tmp_path / "out", cfg, progress=False)
    assert "info_nce@8" in result.final_losses
    assert not any(name.startswith("similarity@") for name in result.final_losses)


# --- whole runs on a tiny model (32 dimensions) -------------------------------------------------------


def mrl_config(base: Path, **changes: object) -> TrainConfig:
    return config(base, **{"matryoshka_dims": (8, 32, 16), **changes})


@pytest.mark.parametrize("method", ["micse", "simcse", "infocse"])
def test_a_run_trains_each_prefix_and_records_the_sizes(tmp_path: Path, tiny_bert: Path, method: str) -> None:
    out = tmp_path / "out"
    changes = {"aux_stage1_steps": 1, "aux_layers": 1} if method == "infocse" else {}
    trained = {"matryoshka_similarity": 1.0, "matryoshka_weights": (1, 1, 1)}
    config = mrl_config(tiny_bert, method=method, **trained, **changes)
    result = train(CORPUS, out, config, progress=False)
    assert {"info_nce", "info_nce@16", "info_nce@8", "similarity@16", "similarity@8"} <= set(
        result.final_losses
    )
    assert all(math.isfinite(v) for v in result.final_losses.values())
    meta = json.loads((out / "embedkit.json").read_text())
    assert meta["matryoshka_dims"] == [32, 16, 8]
    assert meta["training"]["config"]["matryoshka_dims"] == [8, 32, 16]
    assert read_model_spec(out).matryoshka_dims == (32, 16, 8)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("info_nce@8" in r for r in records if "loss" in r)


def test_a_run_without_matryoshka_records_no_sizes(tmp_path: Path, tiny_bert: Path) -> None:
    train(CORPUS, tmp_path / "out", config(tiny_bert, max_steps=2), progress=False)
    assert "matryoshka_dims" not in json.loads((tmp_path / "out" / "embedkit.json").read_text())
    assert read_model_spec(tmp_path / "out").matryoshka_dims == ()


def test_a_run_that_gives_the_base_back_records_no_sizes() -> None:
    from types import SimpleNamespace

    from embedkit.data.corpus import CorpusStats
    from embedkit.training.checkpoint import TrainState
    from embedkit.training.save import train_metadata

    cfg = TrainConfig(matryoshka_dims=(128, 384), dev_retrieval="judged")
    sample = SimpleNamespace(fingerprint="f", stats=CorpusStats(12, 0, 12, 0, 12))

    def metadata(best: float) -> dict:
        state = TrainState(step=4, base_score=0.5, best_score=best, best_step=4)
        return train_metadata(cfg, {"base_fingerprint": "b"}, state, CORPUS, sample, Path("base"), None)

    assert metadata(best=0.6)["matryoshka_dims"] == [384, 128]
    assert "matryoshka_dims" not in metadata(best=0.4)  # no checkpoint beat the base: the base is saved


def test_the_whole_term_runs_through_the_head_and_the_prefixes_on_the_saved_vectors(still_bert: Path) -> None:
    """On a model without dropout both views are one vector: the step's terms against the float64
    reference, `info_nce` over the training head's vectors of the pooled (unrotated) vectors,
    `info_nce@m` over the saved ones' prefixes (the inference path, rotation included), each weighted."""
    from embedkit.training.model import ContrastiveModel
    from embedkit.training.token_table import TokenTable

    cfg = mrl_config(still_bert, matryoshka_weights=(0.5, 2.0, 1.5), queue_size=0, method="simcse")
    model = ContrastiveModel.from_folder(still_bert, cfg)
    model.rotation.weight.copy_(
        torch.linalg.qr(torch.randn(32, 32, generator=torch.Generator().manual_seed(3)))[0]
    )
    batch = TokenTable.from_model(still_bert, 16, CORPUS[:6]).batch(list(range(6)), 16)
    batch = {k: torch.as_tensor(v) for k, v in batch.items()}
    model.train()
    terms = model.step(batch, None).terms
    with torch.no_grad():
        saved = model.sentence_vectors(batch)  # what the model folder gives
        trained = model.head(saved @ model.rotation.weight)  # the head reads the pooled vectors
    (whole,) = reference_matryoshka(trained, trained, None, [32], [1.0], cfg.temperature)
    # the weights go with mrl_config's sizes (8, 32, 16): 0.5 at 8, 2.0 at 32, 1.5 at 16
    at_16, at_8 = reference_matryoshka(saved, saved, None, [16, 8], [1.5, 0.5], cfg.temperature)
    assert float(terms["info_nce"]) == pytest.approx(2.0 * whole, rel=1e-4)
    assert float(terms["info_nce@16"]) == pytest.approx(at_16, rel=1e-4)
    assert float(terms["info_nce@8"]) == pytest.approx(at_8, rel=1e-4)
    assert any(name.startswith("head.") for name in model.state_dict())  # the method keeps its head


def test_a_run_refuses_sizes_the_model_does_not_have_before_writing(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(InputError, match="matryoshka_dims 64: larger than the base model's 32 dimensions"):
        train(CORPUS, out, mrl_config(tiny_bert, matryoshka_dims=(64, 32)), progress=False)
    with pytest.raises(InputError, match="must include 32"):
        train(CORPUS, out, mrl_config(tiny_bert, matryoshka_dims=(16, 8)), progress=False)
    assert not out.exists()


def test_resume_continues_exactly_where_it_stopped(tmp_path: Path, tiny_bert: Path) -> None:
    cfg = mrl_config(
        tiny_bert, method="micse", max_steps=5, save_steps=2, learning_rate=1e-3, matryoshka_weights=(1, 1, 1)
    )
    whole = train(CORPUS, tmp_path / "whole", cfg, progress=False)
    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(CORPUS, run, cfg, progress=False, on_step=kill_after(3))
    assert ckpt.latest_checkpoint(run).name == "step-000002"
    with pytest.raises(InputError, match=r"other settings .*matryoshka_dims"):
        other = cfg.replace(matryoshka_dims=(32, 8), matryoshka_weights=None)
        train(CORPUS, run, other, progress=False, resume=True)
    resumed = train(CORPUS, run, cfg, progress=False, resume=True)
    assert resumed.final_losses == whole.final_losses
    expected = weights(tmp_path / "whole")
    for name, tensor in weights(run).items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6)


def test_by_default_the_model_trains_exactly_as_without_matryoshka(tmp_path: Path, tiny_bert: Path) -> None:
    """The default weights train no prefix: miCSE (queue, AMI) steps the same losses and weights
    as the run without `--matryoshka`, and the folder's vectors are that run's, rotated."""
    import numpy as np

    from embedkit.encode.torch_backend import TorchEncoder

    plain_cfg = config(tiny_bert, method="micse", max_steps=4, learning_rate=1e-3)
    plain = train(CORPUS, tmp_path / "plain", plain_cfg, progress=False)
    mrl = train(CORPUS, tmp_path / "mrl", plain_cfg.replace(matryoshka_dims=(8, 32, 16)), progress=False)
    assert set(mrl.final_losses) == set(plain.final_losses)  # no info_nce@m: nothing trains a prefix
    assert mrl.final_losses == plain.final_losses
    expected = weights(tmp_path / "plain")
    for name, tensor in weights(tmp_path / "mrl").items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0)
    rotation = load_file(tmp_path / "mrl" / "2_Dense" / "model.safetensors")["linear.weight"].numpy()
    assert not np.allclose(rotation, np.eye(32))
    unrotated = TorchEncoder(tmp_path / "plain", device="cpu").encode(CORPUS, batch_size=4, normalize=True)
    saved = TorchEncoder(tmp_path / "mrl", device="cpu").encode(CORPUS, batch_size=4, normalize=True)
    np.testing.assert_allclose(saved, np.asarray(unrotated) @ rotation.T, atol=1e-5)
