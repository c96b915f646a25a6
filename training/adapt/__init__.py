"""`embedkit adapt INDEX`: the index's hybrid ranking of label-free pseudo queries distilled into its
dense model.

One module per part, read in this order: `config` (the settings), `queries` (pseudo queries and the
teacher's candidates), `losses` (listwise KL and candidate cosines, pure functions of tensors),
`student` (the encoder being trained and its dev score), `dev` and `signals` (the dev evaluation and
the step it keeps), `run` (the job the shared training loop runs, `embedkit.training.loop`) and
`report` (the before/after table). The names below load on first use, so
`embedkit.training.adapt.config` is read without torch.
"""

from __future__ import annotations

from embedkit.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AdaptConfig": "embedkit.training.adapt.config",
    "AdaptResult": "embedkit.training.adapt.run",
    "adapt": "embedkit.training.adapt.run",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("embedkit.training.adapt", _EXPORTS, globals())
