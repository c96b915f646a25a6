"""Shared by the training tests: a tiny corpus, short CPU runs on a tiny model, and a killed run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from embedkit.training.config import TrainConfig

# Distinct lengths, so the sentences differ even for a tokenizer that knows few words.
CORPUS = [" ".join(["wing flow"] * n) + f" {n}" for n in range(1, 13)]


def config(base: Path, **changes: object) -> TrainConfig:
    """Four steps of batch 4 with a queue of 6, on CPU even where CUDA exists: the exact-resume
    comparisons need CPU determinism."""
    defaults = {
        "base_model": str(base),
        "batch_size": 4,
        "epochs": 100,
        "max_steps": 4,
        "queue_size": 6,
        "device": "cpu",
    }
    return TrainConfig(**{**defaults, **changes})  # type: ignore[arg-type]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


class Killed(Exception):
    """Stands for the process being killed after a step."""


def kill_after(step: int) -> Callable[[int, dict[str, float]], None]:
    """An `on_step` callback that kills the run after `step`."""

    def on_step(done: int, _terms: dict[str, float]) -> None:
        if done == step:
            raise Killed

    return on_step
