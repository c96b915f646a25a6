"""Training with the miCSE objective (torch): model, losses, momentum queue, trainer.

`embedkit.training.train(corpus, out_dir, TrainConfig(...))` is the entry point; the names below
load on first use, so importing one submodule (say `embedkit.encode.torch_backend`) does not load
the trainer.
"""

from __future__ import annotations

from embedkit.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AdaptConfig": "embedkit.training.adapt.config",
    "AdaptResult": "embedkit.training.adapt.run",
    "adapt": "embedkit.training.adapt.run",
    "TrainConfig": "embedkit.training.config",
    "METHODS": "embedkit.training.config",
    "TrainResult": "embedkit.training.trainer",
    "train": "embedkit.training.trainer",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("embedkit.training", _EXPORTS, globals())
