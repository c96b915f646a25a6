"""No host sync inside a training step: from the batch's copy to the momentum update after the
optimizer step, nothing reads a tensor's value on the host or makes a shape from its values.

On the CPU every such read is made to raise (`host_reads_raise`); on CUDA the steps run under
`torch.cuda.set_sync_debug_mode("error")`, which raises at any synchronising call.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from training_runs import CORPUS, config

from embedkit.training import train_run, trainer
from embedkit.training.model import ContrastiveModel

pytestmark = pytest.mark.usefixtures("one_thread")

# Tensor methods that bring a value to the host (or, for nonzero, make a shape from values)
_READS = ("item", "tolist", "numpy", "cpu", "nonzero", "__bool__", "__int__", "__float__", "__index__")
_TORCH_READS = ("nonzero", "masked_select", "unique", "argwhere")


# Reads of values that live on the host on every device, by the functions that make them: the step
# counts of torch's (non-fused) AdamW, which stay on the CPU, and InfoCSE's dropout seeds, drawn from
# a CPU generator (`infocse.AuxMLM._dropout_seed`).
_HOST_VALUES = {("torch.optim.optimizer", "_get_value"), ("embedkit.training.infocse", "_dropout_seed")}


class HostRead(AssertionError):
    """A step read a tensor's value on the host."""


def _reads_a_host_value() -> bool:
    caller = sys._getframe(2)
    return (caller.f_globals.get("__name__"), caller.f_code.co_name) in _HOST_VALUES


@contextlib.contextmanager
def host_reads_raise(active: list[bool]) -> Iterator[None]:
    """While `active[0]`, every host read of a tensor raises `HostRead` (boolean-mask indexing too)."""
    saved: list[tuple[Any, str, Any]] = []

    def guard(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if active[0] and not _reads_a_host_value():
                raise HostRead(f"{name} inside a step")
            return original(*args, **kwargs)

        saved.append((owner, name, original))
        setattr(owner, name, guarded)

    for name in _READS:
        guard(torch.Tensor, name)
    for name in _TORCH_READS:
        guard(torch, name)
    getitem = torch.Tensor.__getitem__

    def checked_getitem(self: torch.Tensor, index: Any) -> Any:
        parts = index if isinstance(index, tuple) else (index,)
        if active[0] and any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
            raise HostRead("boolean-mask indexing (a shape made from values) inside a step")
        return getitem(self, index)

    saved.append((torch.Tensor, "__getitem__", getitem))
    torch.Tensor.__getitem__ = checked_getitem  # type: ignore[method-assign]
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def _watch_steps(monkeypatch: pytest.MonkeyPatch, active: list[bool], steps: int) -> list[int]:
    """Turn the guard on once a step's batch is on the device, off after its momentum update, for
    the first `steps` steps (the last step reads its losses for the record, as it should)."""
    watched: list[int] = []
    rank_batch, after_step = train_run.rank_batch, ContrastiveModel.after_step

    def batch_then_watch(*args: Any, **kwargs: Any) -> Any:
        batch = rank_batch(*args, **kwargs)  # (two texts an example: called twice a step)
        active[0] = len(watched) < steps
        return batch

    def update_then_stop(self: ContrastiveModel, keys: Any) -> None:
        after_step(self, keys)
        if active[0]:
            watched.append(1)
        active[0] = False

    monkeypatch.setattr(train_run, "rank_batch", batch_then_watch)
    monkeypatch.setattr(ContrastiveModel, "after_step", update_then_stop)
    return watched


RUNS = {
    "simcse": {"method": "simcse"},
    "micse": {"method": "micse"},
    "micse + InforMin-CL + Matryoshka": {
        "method": "micse",
        "reconstruction_weight": 0.1,
        "matryoshka_dims": (32, 8),
        "matryoshka_weights": (1.0, 0.5),
        "matryoshka_similarity": 0.1,
        "matryoshka_rotation_docs": 12,
    },
    "crop views": {"method": "micse", "views": "crop", "positive_max_length": 16},
    "infocse": {"method": "infocse", "aux_stage1_steps": 1},
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_step_reads_nothing_on_the_host(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    active = [False]
    watched = _watch_steps(monkeypatch, active, steps=3)
    cfg = config(tiny_bert, **RUNS[run], max_steps=4, log_steps=1000, save_steps=1000)
    with host_reads_raise(active):
        trainer.train(CORPUS, tmp_path / "out", cfg, progress=False)
    assert len(watched) == 3 and not active[0]


def test_the_guard_catches_a_read(monkeypatch: pytest.MonkeyPatch) -> None:
    active = [True]
    with host_reads_raise(active):
        x = torch.ones(3)
        with pytest.raises(HostRead):
            x.sum().item()
        with pytest.raises(HostRead):
            bool(x.all())
        with pytest.raises(HostRead, match="boolean-mask"):
            x[x > 0]
        x[1:]  # a slice reads no value
    assert x.sum().item() == 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_steps_run_under_the_sync_debug_mode(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    active = [False]
    _watch_steps(monkeypatch, active, steps=3)
    original = train_run.TrainRun.step

    def step_without_syncs(self: train_run.TrainRun, step: int, due: Any) -> None:
        torch.cuda.set_sync_debug_mode("error" if step < 4 else "default")
        try:
            original(self, step, due)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(train_run.TrainRun, "step", step_without_syncs)
    cfg = config(tiny_bert, method="micse", device="cuda", max_steps=4, log_steps=1000, save_steps=1000)
    trainer.train(CORPUS, tmp_path / "out", cfg, progress=False)
