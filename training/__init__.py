"""Training with the miCSE objective (torch): model, losses, momentum queue, trainer.

`embedkit.training.train(corpus, out_dir, TrainConfig(...))` is the entry point; the names below
load on first use, so importing one submodule (say `embedkit.training.encoder`) does not load
the trainer.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "TrainConfig": "embedkit.training.config",
    "METHODS": "embedkit.training.config",
    "TrainResult": "embedkit.training.trainer",
    "train": "embedkit.training.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'embedkit.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
