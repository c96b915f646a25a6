"""The run folder `OUT` while training is unfinished: resumable checkpoints and the metrics log.

`prepare_out_dir` decides whether `OUT` may be used (empty, an unfinished run to resume, or
`--overwrite`); `append_metrics` logs to `OUT/metrics.jsonl`. Checkpoints live in `OUT/checkpoints/`.

A checkpoint `step-000125/` holds everything a killed run needs to continue as if it had not
stopped: the online backbone, the MLP head, the momentum encoder and InfoCSE's auxiliary network
(`model.safetensors`), the queue (`queue.safetensors`), the optimizer (`optimizer.pt`, read back
with `torch.load(weights_only=True)`), the RNG states of torch, of AMI's sampler and of the
auxiliary network's masking (`rng.safetensors`), and the step, scheduler, grad-scaler, scores and
config (`state.json`).
The data order needs no state: epoch e's order is a function of (seed, e).

With several ranks, rank 0 writes the checkpoint, which holds the unwrapped model (no DDP prefix)
and, besides rank 0's torch RNG under the single-process names, every rank's torch RNG (`rankR_*`);
AMI's and the masking generators are the same on every rank. Any number of ranks resumes from it: a
rank whose RNG it does not hold is seeded from (seed, rank, step) (`distributed.rank_seed`).

Every folder is written atomically. A dev-set improvement writes `best-000100/` (backbone
weights only, what the final model is made of). After a checkpoint is written, older ones and
best folders that it does not point to are deleted; on resume, best folders newer than the
checkpoint (from the part of the run that is redone) are deleted too.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError, RunFailure
from embedkit.storage.atomic import atomic_dir, write_text_atomic
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel

CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
_STEP = re.compile(r"^step-(\d+)$")
_BEST = re.compile(r"^best-(\d+)$")


@dataclass
class TrainState:
    """The JSON part of a checkpoint: where the run is and what it has found so far."""

    step: int = 0
    base_score: float | None = None  # dev score of the untrained base model
    best_score: float | None = None  # best dev score of a trained checkpoint
    best_step: int | None = None
    last_losses: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # training time so far, summed over resumed parts


def checkpoint_dir(out_dir: Path) -> Path:
    return out_dir / CHECKPOINTS


def _numbered(out_dir: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    root = checkpoint_dir(out_dir)
    if not root.is_dir():
        return {}
    found = {}
    for path in root.iterdir():
        match = pattern.match(path.name)
        if match and path.is_dir():
            found[int(match.group(1))] = path
    return found


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The newest complete `step-N` folder (atomic writes mean any that exists is complete)."""
    steps = _numbered(out_dir, _STEP)
    return steps[max(steps)] if steps else None


def best_dir(out_dir: Path, step: int) -> Path:
    return checkpoint_dir(out_dir) / f"best-{step:06d}"


def save_best(out_dir: Path, model: ContrastiveModel, step: int, score: float) -> None:
    """Keep the backbone weights of a dev-set improvement (the final model is built from them)."""
    with atomic_dir(best_dir(out_dir, step)) as tmp:
        save_model(model.backbone, str(tmp / "backbone.safetensors"))
        (tmp / "best.json").write_text(json.dumps({"step": step, "score": score}) + "\n", encoding="utf-8")


def load_best(out_dir: Path, model: ContrastiveModel, step: int) -> None:
    path = best_dir(out_dir, step) / "backbone.safetensors"
    if not path.is_file():
        raise RunFailure(f"the best checkpoint of step {step} is missing: {path}")
    load_model(model.backbone, str(path), device=str(next(model.parameters()).device))


def check_finite(model: ContrastiveModel, step: int) -> None:
    """Refuse to checkpoint weights that are no longer finite (the last good one stays)."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise RunFailure(f"weight {name} is no longer finite after step {step}: lower the learning rate")


@dataclass
class TrainingParts:
    """Everything a checkpoint saves and a resume restores, travelling together."""

    model: ContrastiveModel
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None  # fp16 autocast only
    generator: torch.Generator | None  # AMI's sampling RNG, when AMI is on
    aux_generator: torch.Generator | None = None  # the auxiliary MLM's masking RNG (InfoCSE)


def save_checkpoint(
    out_dir: Path,
    parts: TrainingParts,
    state: TrainState,
    meta: dict[str, Any],
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
) -> Path:
    """Write `step-N` atomically, then delete the checkpoints and best folders it supersedes.

    `rank_rng`: with several ranks, every rank's torch RNG states (`distributed.gather_rng_states`).
    """
    model, optimizer, scheduler = parts.model, parts.optimizer, parts.scheduler
    scaler, generator = parts.scaler, parts.generator
    check_finite(model, state.step)
    target = checkpoint_dir(out_dir) / f"step-{state.step:06d}"
    with atomic_dir(target) as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        queue_state: dict[str, Any] = {}
        if model.queue is not None:
            queue_state = model.queue.state_dict()
            save_file({"buffer": queue_state.pop("buffer").contiguous()}, str(tmp / "queue.safetensors"))
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        save_file(rng_tensors(generator, parts.aux_generator, rank_rng), str(tmp / "rng.safetensors"))
        payload = {
            "state": asdict(state),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "queue": queue_state,
            **meta,
        }
        (tmp / "state.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    prune_checkpoints(out_dir, keep_step=state.step, keep_best=state.best_step)
    return target


def load_checkpoint(
    path: Path, parts: TrainingParts, rank: int | None = None, prune: bool = True
) -> TrainState:
    """Restore everything `save_checkpoint` wrote (check `check_resumable` first).

    `rank`: this process's rank when several train together (its own torch RNG is restored where
    the checkpoint holds it, see `has_rank_rng`); `prune`: delete what the resumed run will redo
    (rank 0 only, so that the ranks do not race).
    """
    model, optimizer, scheduler = parts.model, parts.optimizer, parts.scheduler
    scaler, generator = parts.scaler, parts.generator
    payload = read_json(path / "state.json")
    device = next(model.parameters()).device
    load_model(model, str(path / "model.safetensors"), device=str(device))
    if model.queue is not None:
        queue_state = dict(payload.get("queue") or {})
        queue_state["buffer"] = load_file(str(path / "queue.safetensors"))["buffer"]
        model.queue.load_state_dict(queue_state)
        model.queue.to(device)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    scheduler.load_state_dict(payload["scheduler"])
    if scaler is not None and payload.get("scaler"):
        scaler.load_state_dict(payload["scaler"])
    restore_rng(load_file(str(path / "rng.safetensors")), generator, parts.aux_generator, rank)
    state = TrainState(**payload["state"])
    # Best folders written after this checkpoint belong to the part of the run that is redone.
    if prune:
        prune_checkpoints(path.parent.parent, keep_step=state.step, keep_best=state.best_step)
    return state


def has_rank_rng(path: Path, rank: int) -> bool:
    """Whether the checkpoint holds the torch RNG of `rank` (rank 0's is always there)."""
    from safetensors import safe_open

    with safe_open(str(path / "rng.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
    return rank == 0 or f"rank{rank}_torch_cpu" in names


def check_resumable(path: Path, config: TrainConfig, data_fingerprint: str, base_fingerprint: str) -> None:
    """`InputError` when the checkpoint was made from other data, another base or other settings."""
    meta = read_json(path / "state.json")
    if meta.get("data_fingerprint") != data_fingerprint:
        raise InputError("cannot resume: the training sentences differ from the checkpoint's")
    if meta.get("base_fingerprint") != base_fingerprint:
        raise InputError("cannot resume: the base model differs from the one the checkpoint started from")
    saved = TrainConfig.from_dict(meta.get("config", {})).to_dict()
    current = config.to_dict()
    changed = [
        f"{k} {saved[k]!r} -> {current[k]!r}"
        for k in current
        if k not in TrainConfig.RESUMABLE_CHANGES and saved.get(k) != current[k]
    ]
    if changed:
        raise InputError(f"cannot resume with other settings than the checkpoint's: {'; '.join(changed)}")


def remove_checkpoints(out_dir: Path) -> None:
    """Discard an unfinished run's checkpoints (when the user asked to overwrite it)."""
    shutil.rmtree(checkpoint_dir(out_dir), ignore_errors=True)


def prune_checkpoints(out_dir: Path, keep_step: int, keep_best: int | None) -> None:
    """Delete every checkpoint but `keep_step` and every best folder but the one it points to."""
    for step, path in _numbered(out_dir, _STEP).items():
        if step != keep_step:
            shutil.rmtree(path, ignore_errors=True)
    for step, path in _numbered(out_dir, _BEST).items():
        if step != keep_best:
            shutil.rmtree(path, ignore_errors=True)


def rng_tensors(
    generator: torch.Generator | None,
    aux_generator: torch.Generator | None = None,
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
) -> dict[str, torch.Tensor]:
    if rank_rng is None:
        tensors = {"torch_cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            for i, rng in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"torch_cuda_{i}"] = rng
    else:  # rank 0's stream also under the single-process name, for a resume on one process
        tensors = {"torch_cpu": rank_rng[0]["torch_cpu"].clone()}
        for rank, states in enumerate(rank_rng):
            tensors.update({f"rank{rank}_{name}": state for name, state in states.items()})
    if generator is not None:
        tensors["ami_sampler"] = generator.get_state()
    if aux_generator is not None:
        tensors["aux_masking"] = aux_generator.get_state()
    return {k: v.contiguous() for k, v in tensors.items()}


def restore_rng(
    tensors: dict[str, torch.Tensor],
    generator: torch.Generator | None,
    aux_generator: torch.Generator | None = None,
    rank: int | None = None,
) -> None:
    own = f"rank{rank if rank is not None else 0}_torch_"
    if rank is not None and f"{own}cpu" in tensors:  # this rank's streams, saved by a run on several ranks
        torch.set_rng_state(tensors[f"{own}cpu"])
        if torch.cuda.is_available() and f"{own}cuda" in tensors:
            torch.cuda.set_rng_state(tensors[f"{own}cuda"])  # the current device: this rank's
    elif rank is None or rank == 0:
        torch.set_rng_state(tensors["torch_cpu"])
        if torch.cuda.is_available():
            _restore_cuda_rng(tensors, every_device=rank is None)
    if generator is not None and "ami_sampler" in tensors:
        generator.set_state(tensors["ami_sampler"])
    if aux_generator is not None and "aux_masking" in tensors:
        aux_generator.set_state(tensors["aux_masking"])


def _restore_cuda_rng(tensors: dict[str, torch.Tensor], every_device: bool) -> None:
    """A single-process checkpoint's CUDA streams: every device's, or only the current device's."""
    if not every_device:
        name = f"torch_cuda_{torch.cuda.current_device()}"
        if name in tensors:
            torch.cuda.set_rng_state(tensors[name])
        return
    names = [f"torch_cuda_{i}" for i in range(torch.cuda.device_count())]
    cuda = [tensors[name] for name in names if name in tensors]
    if len(cuda) == len(names):
        torch.cuda.set_rng_state_all(cuda)
    elif "rank0_torch_cuda" in tensors:  # a checkpoint of several ranks: rank 0's stream
        torch.cuda.set_rng_state(tensors["rank0_torch_cuda"])


def prepare_out_dir(out: Path, resume: bool, overwrite: bool) -> Path | None:
    """Check what `out` holds; return the checkpoint to resume from, or None to start afresh."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder")
    latest = latest_checkpoint(out) if out.is_dir() else None
    busy = out.is_dir() and any(out.iterdir())
    if resume:
        if latest is None and busy and not overwrite:
            raise InputError(f"nothing to resume in {out}: it holds no checkpoint (a finished model?)")
        return latest
    if busy and not overwrite:
        if latest is not None:
            raise InputError(f"{out} holds an unfinished run: pass --resume to continue it, or --overwrite")
        raise InputError(f"{out} is not empty: choose another --out, or pass --overwrite to replace it")
    return None


def overwrite_run_path(out: Path) -> Path:
    """Where a run that will replace the non-empty `out` keeps its checkpoints: a hidden sibling."""
    return out.parent / f".{out.name}.overwrite-run"


def overwrite_run_dir(out: Path) -> Path:
    """`overwrite_run_path`, emptied: the caller holds `out`'s write lock, so a folder already there
    is a killed run's."""
    run_dir = overwrite_run_path(out)
    shutil.rmtree(run_dir, ignore_errors=True)
    return run_dir


def append_metrics(path: Path, record: dict[str, object]) -> None:
    """Append one JSON line; the file is a log, so an append is enough (resume rewrites it whole).

    A full disk is a `WriteFailure` naming the log (one line, exit 1), as for every other writer.
    """
    from embedkit.storage.write_failures import named_write_failures

    with named_write_failures(path), path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def truncate_metrics(path: Path, step: int) -> None:
    """On resume, drop the records of the steps after the checkpoint: they are about to be redone."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short when the run was killed
        if int(record.get("step", 0)) <= step:
            kept.append(line)
    write_text_atomic(path, "".join(f"{line}\n" for line in kept))
