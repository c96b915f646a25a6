"""The fast step: losses read only at log points, the compact token table, fixed shapes, compile
applied only on CUDA (dropout still random when compiled), the queue following the batch, and the
same losses as a plain reference loop (per-step reads, per-parameter momentum update)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from embedkit.encode.batching import TokenBatcher, pad_encodings
from embedkit.errors import InputError
from embedkit.training import step_speed, train_run, trainer
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel
from embedkit.training.optimizer import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.token_table import TokenTable

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [" ".join(["wing flow"] * n) + f" {n}" for n in range(1, 13)]
CUDA = torch.device("cuda")  # a device object needs no GPU: what the checks see on a GPU machine


def config(base: Path, **changes: object) -> TrainConfig:
    defaults = {"base_model": str(base), "batch_size": 4, "epochs": 100, "max_steps": 4, "device": "cpu"}
    return TrainConfig(**{**defaults, **changes})  # type: ignore[arg-type]


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


# --- no host sync between log points --------------------------------------------------------------

SYNCS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")


def test_embedkit_reads_tensors_only_at_log_and_save_steps(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call that brings a tensor's value to the host, made by this project's code (torch's
    optimizer and transformers are outside it), counted by the step during which it happens."""
    done = [0]  # steps finished (on_step's count)
    seen: list[tuple[int, str, str]] = []
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(str(ROOT)) and "/tests/" not in caller and ".venv" not in caller:
                seen.append((done[0] + 1, _name, Path(caller).name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    cfg = config(tiny_bert, method="micse", max_steps=8, log_steps=4, save_steps=100, queue_size=6)
    trainer.train(CORPUS, tmp_path / "out", cfg, progress=False, on_step=lambda s, _: done.__setitem__(0, s))
    steps = {step for step, _, _ in seen}
    # step 4: the loss read; step 8: the read, the checkpoint (finite check, queue to CPU); 9: the
    # model folder after the run
    assert steps <= {4, 8, 9}, sorted(seen)
    assert (4, "tolist", "step_speed.py") in seen
    logged = [r["step"] for r in records(tmp_path / "out") if "loss" in r]
    assert logged == [4, 8]


def test_loss_reader_finds_the_first_nonfinite_step() -> None:
    reader = step_speed.LossReader()
    totals = [1.0, 2.0, float("nan"), float("inf"), 3.0]
    for step, value in enumerate(totals, 1):
        total = torch.tensor(value)
        reader.add(step, total, {"info_nce": total * 0.5})
        if step == 2:
            assert reader.read() == ({"loss": 2.0, "info_nce": 1.0}, None)
    terms, bad = reader.read()
    assert terms == {"loss": 3.0, "info_nce": 1.5}
    assert bad == 3  # the first one, not the inf after it


def test_throughput_counts_sentences_between_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 10.5, 12.5])
    monkeypatch.setattr(step_speed.time, "perf_counter", lambda: next(clock))
    speed = step_speed.Throughput()  # t = 10
    speed.add(64)
    speed.add(64)
    assert speed.rate() == pytest.approx(128 / 0.5)
    speed.add(100)
    assert speed.rate() == pytest.approx(100 / 2.0)


def test_metrics_carry_sentences_per_second(tmp_path: Path, tiny_bert: Path) -> None:
    cfg = config(tiny_bert, method="simcse", max_steps=3)
    trainer.train(CORPUS, tmp_path / "out", cfg, progress=False)
    steps = [r for r in records(tmp_path / "out") if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]  # log_steps None on CPU: every step
    assert all(r["sentences_per_s"] > 0 for r in steps)


def test_log_steps_default_reads_every_step_on_cpu_and_every_50_on_cuda() -> None:
    assert step_speed.log_every(TrainConfig(), torch.device("cpu")) == 1
    assert step_speed.log_every(TrainConfig(), CUDA) == 50
    assert step_speed.log_every(TrainConfig(log_steps=7), CUDA) == 7
    with pytest.raises(InputError, match="log_steps must be at least 1"):
        TrainConfig(log_steps=0).validate()


# --- the data path ---------------------------------------------------------------------------------


def test_token_table_batches_equal_padded_encodings(tiny_bert: Path) -> None:
    """The compact table against the tokenizer's own encodings padded row by row."""
    texts = CORPUS + ["the cat sits on the wing of a large plane in a high wind"] * 2
    batcher = TokenBatcher(tiny_bert, 12)
    encodings = batcher.tokenizer.encode_batch(texts)
    table = TokenTable.tokenize(batcher.tokenizer, texts, 12, batcher.pad_id, chunk=5)  # 3 chunks
    rows = np.array([13, 0, 7, 3])
    for width in (None, 12):
        expected = pad_encodings(encodings, rows, batcher.pad_id, width)
        got = table.batch(rows, width)
        np.testing.assert_array_equal(got["input_ids"], expected.input_ids)
        np.testing.assert_array_equal(got["attention_mask"], expected.attention_mask)
        np.testing.assert_array_equal(got["token_type_ids"], expected.token_type_ids)
        assert got["input_ids"].dtype == np.int64
    assert table.longest(rows) == max(len(encodings[i].ids) for i in rows)
    assert table.ids.dtype == np.int32 and table.ids.shape == (len(texts), 12)


def test_one_shuffle_per_epoch(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch's order is drawn once, not once a step (an O(N) draw per step is quadratic)."""
    calls: list[int] = []
    real = train_run.epoch_order

    def counted(n: int, seed: int, epoch: int) -> np.ndarray:
        calls.append(epoch)
        return real(n, seed, epoch)

    monkeypatch.setattr(train_run, "epoch_order", counted)
    cfg = config(tiny_bert, method="simcse", max_steps=7)  # 12 sentences, batch 4: 3 steps an epoch
    trainer.train(CORPUS, tmp_path / "out", cfg, progress=False)
    assert calls == [0, 1, 2]


def test_fixed_shapes_pad_to_max_seq_length(tmp_path: Path, tiny_bert: Path) -> None:
    assert not step_speed.fixed_shapes(TrainConfig(), torch.device("cpu"))
    assert step_speed.fixed_shapes(TrainConfig(), CUDA)
    assert not step_speed.fixed_shapes(TrainConfig(pad_to_max_length=False), CUDA)
    widths: list[int] = []
    real = train_run.rank_batch

    def recording(*args, **kwargs):
        batch = real(*args, **kwargs)
        widths.append(batch["input_ids"].shape[1])
        return batch

    import unittest.mock

    with unittest.mock.patch.object(train_run, "rank_batch", recording):
        cfg = config(tiny_bert, method="micse", max_seq_length=40, pad_to_max_length=True, max_steps=2)
        result = trainer.train(CORPUS, tmp_path / "fixed", cfg, progress=False)
        assert widths == [40, 40] and np.isfinite(result.final_losses["loss"])
        widths.clear()
        trainer.train(CORPUS, tmp_path / "longest", cfg.replace(pad_to_max_length=None), progress=False)
        assert max(widths) < 40  # the CPU default: the longest sentence of each batch


# --- compile -----------------------------------------------------------------------------------------


def test_compile_is_applied_only_under_cuda(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[tuple[object, dict]] = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compiled.append((module, kw)) or module)
    monkeypatch.setattr(step_speed, "side_stream", lambda device: f"stream on {device.type}")
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse"))
    assert not step_speed.compile_model(model, "off", CUDA) and not compiled
    with pytest.raises(InputError, match="compile=default needs a CUDA device"):
        step_speed.compile_model(model, "default", torch.device("cpu"))
    assert not compiled and not model.runners
    assert step_speed.compile_model(model, "reduce-overhead", CUDA)
    assert [m for m, _ in compiled] == [model.backbone, model.momentum, model.objective]
    assert all(kw == {"mode": "reduce-overhead"} for _, kw in compiled)
    assert set(model.runners) == {"backbone", "momentum", "objective"}
    assert set(model.state_dict()) == set(ContrastiveModel.from_folder(tiny_bert, model.config).state_dict())
    # the trainer refuses it on the CPU before anything is written
    with pytest.raises(InputError, match="needs a CUDA device"):
        trainer.train(CORPUS, tmp_path / "out", config(tiny_bert, compile="default"), progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="unknown compile 'fast'"):
        TrainConfig(compile="fast").validate()


def test_cuda_graphs_are_the_default_on_cuda_only(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    assert TrainConfig().compile == "auto"
    assert step_speed.compile_mode("auto", CUDA) == "reduce-overhead"
    assert step_speed.compile_mode("auto", cpu) == "off"
    assert step_speed.compile_mode("off", CUDA) == "off"
    assert step_speed.compile_mode("default", CUDA) == "default"
    assert step_speed.side_stream(cpu) is None
    compiled: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compiled.append(kw) or module)
    monkeypatch.setattr(step_speed, "side_stream", lambda device: f"stream on {device.type}")
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse"))
    assert not step_speed.compile_model(model, "auto", cpu) and not compiled
    assert model.momentum_stream == "stream on cpu"  # what side_stream gives: None on a real CPU
    # CUDA graphs by default; the momentum forward, then a graph replay, stays on the step's stream
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse"))
    assert step_speed.compile_model(model, "auto", CUDA)
    assert compiled == [{"mode": "reduce-overhead"}] * 3 and model.momentum_stream is None
    # uncompiled (or compiled without graphs) on CUDA, the momentum forward gets a stream of its own
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse"))
    assert not step_speed.compile_model(model, "off", CUDA)
    assert model.momentum_stream == "stream on cuda"
    simcse = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="simcse"))
    step_speed.compile_model(simcse, "off", CUDA)
    assert simcse.momentum_stream is None  # no momentum encoder


def _views_and_steps(model: ContrastiveModel, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The [x; x] pass's pooled rows of two training calls on the same batch."""
    seen: list[torch.Tensor] = []
    backbone = model.runners["backbone"]

    def recording(**inputs):
        out = backbone(**inputs)
        seen.append(out.last_hidden_state.detach()[:, 0])
        return out

    model.runners["backbone"] = recording
    model.train()
    for _ in range(2):
        out = model.step(batch, torch.Generator().manual_seed(0))
        out.loss.backward()
    model.runners["backbone"] = backbone
    return seen


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_step_keeps_dropout_random(tiny_bert: Path, backend: str) -> None:
    """Compiled, the two views differ, the next step's masks differ, and without dropout the
    compiled pass equals the eager one. (inductor takes minutes to compile on a CPU: slow.)"""
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="micse", queue_size=8))
    model.runners["backbone"] = torch.compile(model.backbone, backend=backend)
    batcher = TokenBatcher(tiny_bert, 16)
    table = TokenTable.tokenize(batcher.tokenizer, CORPUS[:4], 16, batcher.pad_id)
    batch = step_speed.to_device(table.batch(np.arange(4), 16), torch.device("cpu"))
    first, second = _views_and_steps(model, batch)  # (2B, D) each
    assert not torch.allclose(first[:4], first[4:], atol=1e-4)  # view 1 vs view 2
    assert not torch.allclose(first, second, atol=1e-4)  # step 1 vs step 2
    model.eval()
    with torch.no_grad():
        eager = model.backbone(**model.model_inputs(batch)).last_hidden_state
        compiled = model.runners["backbone"](**model.model_inputs(batch)).last_hidden_state
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def test_compiled_step_hands_ami_its_maps_and_gradient(still_bert: Path) -> None:
    """Compiled (AOT autograd, as CUDA graphs run it), AMI's layers still hand their maps to the
    compiled loss terms: the same terms and the same gradient into an AMI layer's queries."""
    batcher = TokenBatcher(still_bert, 16)
    table = TokenTable.tokenize(batcher.tokenizer, CORPUS[:4], 16, batcher.pad_id)
    batch = step_speed.to_device(table.batch(np.arange(4), 16), torch.device("cpu"))
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = ContrastiveModel.from_folder(
            still_bert, config(still_bert, method="ami-simcse", ami_weight=1.0)
        )
        if compiled:
            model.runners["backbone"] = torch.compile(model.backbone, backend="aot_eager")
            model.runners["objective"] = torch.compile(model.objective, backend="aot_eager")
        out = model.step(batch, torch.Generator().manual_seed(0))
        out.loss.backward()
        query = model.backbone.encoder.layer[model.ami_layers[-1]].attention.self.query.weight
        results.append(({k: v.item() for k, v in out.terms.items()}, query.grad.clone()))
    (eager_terms, eager_grad), (compiled_terms, compiled_grad) = results
    assert eager_terms["ami"] < -1e-3 and compiled_terms == pytest.approx(eager_terms, rel=1e-5)
    torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-4, atol=1e-7)


# --- larger batches: the queue follows -------------------------------------------------------------


@pytest.mark.parametrize(("batch", "queue"), [(64, 384), (256, 1536), (512, 3072)])
def test_queue_length_follows_the_batch(batch: int, queue: int) -> None:
    """Six batches of keys: miCSE's 384 at batch 64 (Sec. 3.1), the same share at larger batches."""
    cfg = TrainConfig(batch_size=batch)
    assert cfg.queue_length == queue
    assert cfg.to_dict()["queue_size"] == queue  # what the run used is what its records say
    assert TrainConfig().with_overrides([f"batch_size={batch}"]).queue_length == queue
    assert TrainConfig(batch_size=batch, queue_size=100).queue_length == 100  # set: kept as given


def test_model_queue_and_bad_queue_size(tiny_bert: Path) -> None:
    model = ContrastiveModel.from_folder(tiny_bert, config(tiny_bert, method="moco-simcse", batch_size=8))
    assert model.queue is not None and model.queue.size == 48
    with pytest.raises(InputError, match="queue_size must be at least 1"):
        TrainConfig(queue_size=0).validate()


# --- the same losses as before ---------------------------------------------------------------------


def _reference_losses(base: Path, cfg: TrainConfig, texts: list[str]) -> list[float]:
    """The plain loop the trainer ran before: encodings padded per batch, a shuffle drawn every step,
    the loss read after every step, the momentum encoder moved one parameter at a time."""
    torch.manual_seed(cfg.seed)
    model = ContrastiveModel.from_folder(base, cfg)
    batcher = TokenBatcher(base, cfg.max_seq_length)
    encodings = batcher.tokenizer.encode_batch(texts)
    per_epoch = len(texts) // cfg.batch_size
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg.max_steps, cfg.warmup_ratio)
    generator = torch.Generator().manual_seed(cfg.seed)
    seen = []
    for step in range(cfg.max_steps):
        epoch, offset = divmod(step, per_epoch)
        order = np.random.default_rng([cfg.seed, epoch]).permutation(len(texts))
        rows = order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size]
        padded = pad_encodings(encodings, rows, batcher.pad_id)
        batch = {
            "input_ids": torch.from_numpy(padded.input_ids),
            "attention_mask": torch.from_numpy(padded.attention_mask),
            "token_type_ids": torch.from_numpy(padded.token_type_ids),
        }
        model.train()
        out = model.step(batch, generator)
        seen.append(out.total.item())
        optimizer_step(out.loss, model, optimizer, scheduler, None, cfg.max_grad_norm)
        with torch.no_grad():
            online = dict(model.backbone.named_parameters())
            for name, target in model.momentum.encoder.named_parameters():
                target.copy_(cfg.momentum_decay * target + (1 - cfg.momentum_decay) * online[name])
        model.queue.enqueue(out.keys)
    return seen


def test_same_seed_same_losses_as_the_plain_loop(tmp_path: Path, tiny_bert: Path) -> None:
    cfg = config(tiny_bert, method="micse", max_steps=6, max_seq_length=32, momentum_decay=0.9)
    seen: list[float] = []
    trainer.train(CORPUS, tmp_path / "out", cfg, progress=False, on_step=lambda s, t: seen.append(t["loss"]))
    expected = _reference_losses(tiny_bert, cfg, CORPUS)
    np.testing.assert_allclose(seen, expected, rtol=1e-5, atol=1e-6)


def test_progress_bar_status_shows_sentences_per_second() -> None:
    from embedkit.training.display import TrainDisplay

    updates: list[dict] = []

    class FakeBar:
        def update(self, **fields: object) -> None:
            updates.append(fields)

    display = TrainDisplay(10, enabled=False)
    display.progress = FakeBar()  # type: ignore[assignment]
    display.rate(3204.6)
    display.advance(3, {"loss": 0.5})
    assert updates == [{"completed": 3, "status": "loss 0.5000 3,205 sent/s"}]
