"""An unfinished `embedkit adapt` run in `OUT/checkpoints/`: what a killed run continues from.

At every dev evaluation but the last, `step-N/` is written atomically with everything the next
steps depend on: the student's weights (`model.safetensors`), AdamW's moments (`optimizer.pt`, read
back with `torch.load(weights_only=True)`), the candidates' vectors as that evaluation refreshed
them (`doc_vectors.safetensors`), the torch RNG (dropout), and in `state.json` the step, the
scheduler, the grad scaler, the hard-negative sampler's `random.Random` state, the dev scores so
far, the settings and what the run was made from. A dev improvement writes `best-N/` (the weights
the model folder is made of). The pseudo queries and the teacher's candidates are a function of
(index, settings) and are mined again on resume; the batch order is a function of (seed, epoch).

`training/checkpoint.py` owns the folder rules shared with `embedkit train` (`prepare_out_dir`,
the `step-N` / `best-N` names, pruning, the RNG tensors); this module owns what adapt puts in them.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError, RunFailure
from embedkit.storage.atomic import atomic_dir
from embedkit.training import checkpoint as ckpt
from embedkit.training.adapt.config import AdaptConfig

# settings that may differ on resume: they change no number the run computes
RESUMABLE_CHANGES = frozenset({"device"})


@dataclass
class AdaptState:
    """Where an adapt run is: the step, and the dev scores (label -> nDCG@10) of the base and the best."""

    step: int = 0
    selection: str = ""  # the label the best step is chosen on
    base_scores: dict[str, float] = field(default_factory=dict)
    best_scores: dict[str, float] = field(default_factory=dict)  # the best step's so far (none: empty)
    best_step: int | None = None  # the best step so far by `selection` (None: none evaluated yet)
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (step, scores) each eval

    @property
    def best(self) -> float:
        return self.best_scores.get(self.selection, float("-inf"))


@dataclass
class AdaptParts:
    """What a checkpoint saves besides `AdaptState`, travelling together."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None
    sampler: random.Random  # the hard negatives' sampler
    doc_vectors: torch.Tensor  # (N, D) the candidates' vectors at the last refresh


def save_adapt_checkpoint(
    run_dir: Path, parts: AdaptParts, state: AdaptState, made_from: dict[str, Any]
) -> Path:
    """Write `step-N` atomically, then delete the checkpoints and best folders it supersedes."""
    for name, param in parts.model.named_parameters():
        if not torch.isfinite(param).all():
            raise RunFailure(f"weight {name} is no longer finite after step {state.step}: lower --lr")
    target = ckpt.checkpoint_dir(run_dir) / f"step-{state.step:06d}"
    with atomic_dir(target) as tmp:
        save_file(_contiguous(parts.model.state_dict()), str(tmp / "model.safetensors"))
        save_file(
            {"vectors": parts.doc_vectors.detach().cpu().contiguous()}, str(tmp / "doc_vectors.safetensors")
        )
        torch.save(parts.optimizer.state_dict(), tmp / "optimizer.pt")
        save_file(ckpt.rng_tensors(None), str(tmp / "rng.safetensors"))
        version, internal, gauss = parts.sampler.getstate()
        payload = {
            "state": asdict(state),
            "scheduler": parts.scheduler.state_dict(),
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            "sampler": [version, list(internal), gauss],
            **made_from,
        }
        (tmp / "state.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    ckpt.prune_checkpoints(run_dir, keep_step=state.step, keep_best=state.best_step)
    return target


def load_adapt_checkpoint(path: Path, parts: AdaptParts) -> AdaptState:
    """Restore what `save_adapt_checkpoint` wrote into `parts` (check `check_adapt_resumable` first)."""
    payload = read_json(path / "state.json")
    device = parts.doc_vectors.device
    parts.model.load_state_dict(load_file(str(path / "model.safetensors"), device=str(device)))
    parts.doc_vectors.copy_(load_file(str(path / "doc_vectors.safetensors"))["vectors"].to(device))
    parts.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    parts.scheduler.load_state_dict(payload["scheduler"])
    if parts.scaler is not None and payload.get("scaler"):
        parts.scaler.load_state_dict(payload["scaler"])
    version, internal, gauss = payload["sampler"]
    parts.sampler.setstate((version, tuple(internal), gauss))
    ckpt.restore_rng(load_file(str(path / "rng.safetensors")), None)
    saved = payload["state"]
    state = AdaptState(**{**saved, "history": [(int(st), sc) for st, sc in saved.get("history", [])]})
    # best folders written after this checkpoint belong to the part of the run that is redone
    ckpt.prune_checkpoints(path.parent.parent, keep_step=state.step, keep_best=state.best_step)
    return state


def check_adapt_resumable(path: Path, config: AdaptConfig, made_from: dict[str, Any]) -> None:
    """`InputError` when the checkpoint was made from another index, model, queries or settings."""
    saved = read_json(path / "state.json")
    before, now = saved.get("config", {}), config.to_dict()
    changed = [
        f"{k} {before.get(k)!r} -> {now[k]!r}"
        for k in now
        if k not in RESUMABLE_CHANGES and before.get(k) != now[k]
    ]
    if changed:
        raise InputError(f"cannot resume with other settings than the checkpoint's: {'; '.join(changed)}")
    for key, what in (("index", "the index's documents or vectors"), ("queries", "the pseudo queries")):
        if saved.get(key) != made_from[key]:
            raise InputError(f"cannot resume: {what} differ from the checkpoint's ({path})")


def save_adapt_best(run_dir: Path, model: torch.nn.Module, step: int, scores: dict[str, float]) -> None:
    """Keep the weights of a dev improvement: the model folder is made of them."""
    with atomic_dir(ckpt.best_dir(run_dir, step)) as tmp:
        save_file(_contiguous(model.state_dict()), str(tmp / "model.safetensors"))
        (tmp / "best.json").write_text(json.dumps({"step": step, "scores": scores}) + "\n", encoding="utf-8")


def load_adapt_best(run_dir: Path, model: torch.nn.Module, step: int) -> None:
    path = ckpt.best_dir(run_dir, step) / "model.safetensors"
    if not path.is_file():
        raise RunFailure(f"the best weights of step {step} are missing: {path}")
    model.load_state_dict(load_file(str(path), device=str(next(model.parameters()).device)))


def _contiguous(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared or strided storage; a clone per tensor is what a save costs anyway
    return {k: v.detach().contiguous().clone() for k, v in state.items()}


__all__ = [
    "AdaptParts",
    "AdaptState",
    "check_adapt_resumable",
    "load_adapt_best",
    "load_adapt_checkpoint",
    "save_adapt_best",
    "save_adapt_checkpoint",
]
