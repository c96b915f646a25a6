"""The trainer end to end on a tiny random BERT (CPU, a few steps each).

What is deterministic here: on CPU with a fixed thread count, the same seed gives bit-identical
runs (dropout masks, data order, AMI's sampling and the momentum branch all come from seeded
generators that checkpoints save), so a killed-and-resumed run must equal an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from training_runs import CORPUS, Killed, config, weights

from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError, RunFailure
from embedkit.training import checkpoint as ckpt
from embedkit.training import losses
from embedkit.training.batches import pad_batch, steps_per_epoch
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel
from embedkit.training.optimizer import lr_factor
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")


def metric_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


# --- the objective on one batch --------------------------------------------------------------------


def test_step_matches_a_numpy_reference(tiny_bert: Path) -> None:
    cfg = config(tiny_bert, method="micse", reconstruction_weight=0.5, queue_size=5)
    model = ContrastiveModel.from_folder(tiny_bert, cfg)
    model.queue.enqueue(torch.randn(3, model.dim))  # a partly filled queue: 3 of 5 rows
    from embedkit.encode.batching import TokenBatcher

    batcher = TokenBatcher(tiny_bert, 32)
    batch = pad_batch(
        batcher.tokenizer.encode_batch(CORPUS[:4]), np.arange(4), batcher.pad_id, torch.device("cpu")
    )
    model.eval()  # no dropout: both views are the same vectors
    out = model.step(batch, torch.Generator().manual_seed(0))

    with torch.no_grad():
        hidden = model.backbone(**batch).last_hidden_state.numpy()
    mask = batch["attention_mask"].numpy()[:, :, None]
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    w, b = model.head.dense.weight.detach().numpy(), model.head.dense.bias.detach().numpy()
    e = np.tanh(pooled @ w.T + b)
    keys = np.concatenate([e, model.queue.keys().numpy()])
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    logits = unit(e) @ unit(keys).T / 0.05  # (4, 4 + 3)
    log_softmax = logits - logits.max(1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(1, keepdims=True))
    expected_nce = -np.mean(np.diag(log_softmax[:, :4]))

    assert out.terms["info_nce"].item() == pytest.approx(expected_nce, rel=1e-4)
    # identical views: rho = 1, clamped to rho^2 = 1 - 1e-6, I = -1/2 log(1e-6) for every slice
    assert out.terms["ami"].item() == pytest.approx(-2.5e-3 * -0.5 * math.log(1e-6), rel=1e-3)
    assert out.terms["reconstruction"].item() == pytest.approx(0.0, abs=1e-8)
    assert out.loss.item() == pytest.approx(sum(v.item() for v in out.terms.values()), rel=1e-6)

    # the momentum keys are (B, D) and enter the queue after the step, oldest rows dropped
    assert out.keys.shape == (4, model.dim)
    model.after_step(out.keys)
    assert len(model.queue) == 5
    torch.testing.assert_close(model.queue.keys()[-4:], out.keys)


def test_schedule_matches_transformers() -> None:
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=3, num_training_steps=10)
    for step in range(10):
        assert lr_factor(step, 10, 3) == pytest.approx(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert [steps_per_epoch(n, 4) for n in (8, 9, 10, 3)] == [2, 2, 3, 1]  # a lone last sentence is dropped


def test_an_overflowed_fp16_step_is_skipped_with_its_schedule() -> None:
    """The GradScaler skips a step with inf gradients; the schedule must not advance (as HF's Trainer)."""
    from embedkit.training.optimizer import optimizer_step

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    before = model.weight.detach().clone()
    optimizer_step((model.weight * float("inf")).sum(), model, optimizer, scheduler, scaler, 1.0)
    assert torch.equal(model.weight, before) and scheduler.last_epoch == 0 and scaler.get_scale() == 2.0**15
    optimizer_step(model(torch.ones(1, 3)).sum(), model, optimizer, scheduler, scaler, 1.0)
    assert not torch.equal(model.weight, before) and scheduler.last_epoch == 1


# --- whole runs --------------------------------------------------------------------------------------


def test_loss_goes_down_on_a_repeated_corpus(tmp_path: Path, tiny_bert: Path) -> None:
    seen: list[float] = []
    cfg = config(tiny_bert, method="simcse", batch_size=8, max_steps=40, learning_rate=1e-3, warmup_ratio=0.0)
    train(
        CORPUS[:8] * 5,
        tmp_path / "out",
        cfg,
        progress=False,
        on_step=lambda step, terms: seen.append(terms["loss"]),
    )
    assert len(seen) == 40
    assert np.mean(seen[-5:]) < 0.5 * np.mean(seen[:5])


def test_saved_model_loads_and_records_its_making(tmp_path: Path, tiny_bert: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from embedkit.encode.torch_backend import TorchEncoder

    out = tmp_path / "out"
    result = train(CORPUS, out, config(tiny_bert, method="micse", learning_rate=1e-3), progress=False)
    assert result.steps == 4 and result.sentences == 12

    texts = ["a wing", *CORPUS[:5]]
    st = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(st, TorchEncoder(out, device="cpu").encode(texts), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(st, axis=1), 1.0, atol=1e-5)

    assert not (out / "checkpoints").exists()
    meta = json.loads((out / "embedkit.json").read_text())
    sha = lambda *parts: hashlib.sha256(b"".join(parts)).hexdigest()[:16]  # noqa: E731
    assert meta["fingerprint"] == sha(b"model.safetensors", (out / "model.safetensors").read_bytes())
    # the base is named by its full identity (weights, tokenizer, pooling: `embedkit.encode.identity`)
    assert meta["base_model"]["fingerprint"] == model_fingerprint(tiny_bert)
    assert meta["base_model"]["fingerprint"] != model_fingerprint(out)
    assert meta["data"]["fingerprint"] == sha("".join(s + "\n" for s in CORPUS).encode())
    assert meta["method"] == "micse" and meta["training"]["config"]["learning_rate"] == 1e-3
    assert meta["training"]["steps"] == 4
    steps = [r["step"] for r in metric_records(out) if "loss" in r]
    assert steps == [1, 2, 3, 4]
    changed = [k for k, v in weights(tiny_bert).items() if not torch.equal(v, weights(out)[k])]
    assert changed  # training moved the weights


@pytest.mark.parametrize(
    ("method", "terms", "queue"),
    [
        ("simcse", {"loss", "info_nce"}, False),
        ("ami-simcse", {"loss", "info_nce", "ami"}, False),
        ("moco-simcse", {"loss", "info_nce"}, True),
        ("micse", {"loss", "info_nce", "ami", "reconstruction"}, True),
    ],
)
def test_each_method_runs(tmp_path: Path, tiny_bert: Path, method: str, terms: set[str], queue: bool) -> None:
    weight = 0.1 if method == "micse" else 0.0
    result = train(
        CORPUS,
        tmp_path / "out",
        config(tiny_bert, method=method, max_steps=3, reconstruction_weight=weight),
        progress=False,
    )
    assert set(result.final_losses) == terms
    queued = [r["queue"] for r in metric_records(tmp_path / "out") if "queue" in r]
    assert queued == ([4, 6, 6] if queue else [0, 0, 0])  # batch 4 into a queue of 6


def test_model_without_token_type_ids_and_cls_pooling(tmp_path: Path, tiny_bert_no_types: Path) -> None:
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    train(CORPUS, out, config(tiny_bert_no_types, method="micse", max_steps=2), progress=False)
    spec = read_model_spec(out)
    assert (spec.pooling, spec.normalize, spec.model_type) == ("cls", True, "distilbert")
    st = SentenceTransformer(str(out), device="cpu").encode(CORPUS[:3], convert_to_numpy=True)
    np.testing.assert_allclose(np.linalg.norm(st, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("kill_after", [2, 3])
def test_resume_continues_exactly_where_it_stopped(tmp_path: Path, tiny_bert: Path, kill_after: int) -> None:
    cfg = config(tiny_bert, method="micse", max_steps=5, save_steps=2, learning_rate=1e-3)
    whole = train(CORPUS, tmp_path / "whole", cfg, progress=False)

    def kill(step: int, _terms: dict[str, float]) -> None:
        if step == kill_after:
            raise Killed

    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(CORPUS, run, cfg, progress=False, on_step=kill)
    assert ckpt.latest_checkpoint(run).name == "step-000002"  # killed after step 2 or 3: resume from 2
    assert not (run / "model.safetensors").exists()
    with pytest.raises(InputError, match="holds an unfinished run: pass --resume"):
        train(CORPUS, run, cfg, progress=False)
    resumed = train(CORPUS, run, cfg, progress=False, resume=True)

    assert resumed.steps == whole.steps == 5
    assert resumed.final_losses == whole.final_losses
    expected = weights(tmp_path / "whole")
    for name, tensor in weights(run).items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6)
    steps = [r["step"] for r in metric_records(run) if "loss" in r]
    assert steps == [1, 2, 3, 4, 5]  # the redone step is logged once
    assert [r["step"] for r in metric_records(run) if r.get("event") == "resume"] == [2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["auto", "fp16"])
def test_cuda_mixed_precision_run_resumes(tmp_path: Path, tiny_bert: Path, precision: str) -> None:
    """On CUDA: bf16 autocast (auto) or fp16 with a GradScaler; kill, resume, load the result."""
    from sentence_transformers import SentenceTransformer

    cfg = config(tiny_bert, method="micse", device="cuda", precision=precision, max_steps=5, save_steps=2)

    def kill(step: int, _terms: dict[str, float]) -> None:
        if step == 3:
            raise Killed

    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(CORPUS, run, cfg, progress=False, on_step=kill)
    state = json.loads((ckpt.latest_checkpoint(run) / "state.json").read_text())
    assert state["state"]["step"] == 2 and (state["scaler"] is not None) == (precision == "fp16")
    result = train(CORPUS, run, cfg, progress=False, resume=True)
    assert result.steps == 5 and all(math.isfinite(v) for v in result.final_losses.values())
    assert all(torch.isfinite(t).all() for t in weights(run).values())
    vectors = SentenceTransformer(str(run), device="cuda").encode(CORPUS[:3], convert_to_numpy=True)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


def test_resume_refuses_other_settings(tmp_path: Path, tiny_bert: Path) -> None:
    cfg = config(tiny_bert, max_steps=3, save_steps=1)

    def kill(step: int, _terms: dict[str, float]) -> None:
        raise Killed

    with pytest.raises(Killed):
        train(CORPUS, tmp_path / "run", cfg, progress=False, on_step=kill)
    with pytest.raises(InputError, match=r"other settings .*learning_rate 3e-05 -> 0.001"):
        train(CORPUS, tmp_path / "run", cfg.replace(learning_rate=1e-3), progress=False, resume=True)
    with pytest.raises(InputError, match="training sentences differ"):
        train(CORPUS[:6], tmp_path / "run", cfg, progress=False, resume=True)


def test_nonfinite_loss_stops_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = losses.info_nce
    calls = []

    def nan_at_step_3(*args, **kwargs):
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) == 3 else loss

    monkeypatch.setattr(losses, "info_nce", nan_at_step_3)
    out = tmp_path / "out"
    cfg = config(tiny_bert, method="moco-simcse", max_steps=4, save_steps=2)
    with pytest.raises(
        RunFailure, match=r"loss became nan at step 3 .*last good checkpoint is .*step-000002"
    ):
        train(CORPUS, out, cfg, progress=False)
    assert ckpt.latest_checkpoint(out).name == "step-000002"
    assert not (out / "config.json").exists()  # no model folder from a failed run
    assert metric_records(out)[-1]["event"] == "nonfinite"

    monkeypatch.setattr(losses, "info_nce", real)
    result = train(CORPUS, out, cfg, progress=False, resume=True)  # the kept checkpoint is usable
    assert result.steps == 4


def test_dev_set_selects_the_best_checkpoint(tmp_path: Path, tiny_bert: Path) -> None:
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer

    pairs = [(CORPUS[i], CORPUS[(i * 5 + 1) % 12], float(i % 5)) for i in range(12)]
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs))

    def dev_score(model_dir: Path) -> float:
        st = SentenceTransformer(str(model_dir), device="cpu")
        a = st.encode([p[0] for p in pairs], normalize_embeddings=True)
        b = st.encode([p[1] for p in pairs], normalize_embeddings=True)
        return 100.0 * float(spearmanr((a * b).sum(1), [p[2] for p in pairs]).statistic)  # as `eval sts`

    cfg = config(tiny_bert, method="simcse", max_steps=6, eval_steps=2, learning_rate=3e-3, dev_sts=str(dev))
    result = train(CORPUS, tmp_path / "out", cfg, progress=False)

    assert result.base_dev_score == pytest.approx(dev_score(tiny_bert), abs=1e-4)
    assert result.dev_score == pytest.approx(
        dev_score(tmp_path / "out"), abs=1e-4
    )  # the saved one is the best
    evaluated = {
        r["step"]: r["dev_spearman_cosine"]
        for r in metric_records(tmp_path / "out")
        if "dev_spearman_cosine" in r
    }
    assert sorted(evaluated) == [0, 2, 4, 6]
    trained = {s: v for s, v in evaluated.items() if s}
    assert result.dev_score == max(trained.values()) and trained[result.best_step] == result.dev_score
    assert result.worse_than_base == (result.dev_score < result.base_dev_score)
    meta = json.loads((tmp_path / "out" / "embedkit.json").read_text())
    assert (
        meta["dev"]["best_score"] == result.dev_score and meta["dev"]["base_score"] == result.base_dev_score
    )


def test_out_dir_rules_and_nothing_written_for_bad_input(tmp_path: Path, tiny_bert: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="is not empty: choose another --out, or pass --overwrite"):
        train(CORPUS, busy, config(tiny_bert), progress=False)
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    with pytest.raises(InputError, match="nothing to resume"):
        train(CORPUS, busy, config(tiny_bert), progress=False, resume=True)

    fresh = tmp_path / "fresh"
    with pytest.raises(InputError, match="at least 2 distinct sentences"):
        train(["same", "same"], fresh, config(tiny_bert), progress=False)
    with pytest.raises(InputError, match="not a model folder"):
        train(CORPUS, fresh, config(tmp_path), progress=False)
    with pytest.raises(InputError, match="fp16 training needs a CUDA device"):
        train(CORPUS, fresh, config(tiny_bert, device="cpu", precision="fp16"), progress=False)
    assert not fresh.exists()


def test_config_overrides_and_validation() -> None:
    cfg = TrainConfig().with_overrides(
        ["learning_rate=1e-5", "ami_layers=4,5", "max_steps=none", "split-sentences=yes"]
    )
    assert (cfg.learning_rate, cfg.ami_layers, cfg.max_steps, cfg.split_sentences) == (
        1e-5,
        (4, 5),
        None,
        True,
    )
    # the saved settings record the queue length the run used (6 x the batch when not set)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg.replace(queue_size=384)
    with pytest.raises(InputError, match="batch_size='x' is not a valid int"):
        TrainConfig().with_overrides({"batch_size": "x"})
    with pytest.raises(InputError, match="unknown training setting 'lr'"):
        TrainConfig().with_overrides(["lr=1"])
    with pytest.raises(InputError, match="learning_rate must be a positive finite number"):
        TrainConfig(learning_rate=float("inf")).validate()
    # AMI's layers form their maps whatever the kernel of the others
    assert TrainConfig(attn_implementation="sdpa").validate().uses_ami
