"""An unfinished run's folder: checkpoints to resume from, the best dev step's weights, the metrics log.

`embedkit train` and `embedkit adapt` keep an unfinished run in `OUT` (or, when it replaces a folder,
in a hidden sibling: `run_folder`). In `OUT/checkpoints/`:

- `step-000125/`: everything a killed run needs to continue as if it had not stopped (`Parts`): the
  weights (`model.safetensors`), the optimizer (`optimizer.pt`, read back with
  `torch.load(weights_only=True)`), the RNG states (`rng.safetensors`: torch's and the job's own
  generators by name) and `state.json`: where the run is (`TrainState`, `AdaptState`), the scheduler,
  the grad scaler, what the run was made from, and the entries of the job's own part (`Extra`).
  Train's own part is the momentum queue (`QueueFile`), adapt's the candidates' vectors and the
  hard-negative sampler (`CandidateVectors`).
- `best-000100/`: the weights of a dev improvement, what the model folder is made of (`BestWeights`).

Every folder is written atomically. After a checkpoint is written, older ones and best folders that
it does not point to are deleted; on resume, best folders newer than the checkpoint (from the part of
the run that is redone) are deleted too. The data order needs no state: it is a function of
(seed, epoch). A resume first checks that the checkpoint was made from the same data, model and
settings (`check_train_resumable`, `check_adapt_resumable`). Train logs to `OUT/metrics.jsonl`
(`append_metrics`).

With several ranks, rank 0 writes the checkpoint, which holds the unwrapped model (no DDP prefix)
and, besides rank 0's torch RNG under the single-process names, every rank's torch RNG (`rankR_*`);
AMI's and the masking generators are the same on every rank. Any number of ranks resumes from it: a
rank whose RNG it does not hold is seeded from (seed, rank, step) (`distributed.rank_seed`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError, RunFailure
from embedkit.storage.atomic import atomic_dir, write_text_atomic
from embedkit.training.config import TrainConfig
from embedkit.training.rng import restore_rng, rng_tensors

if TYPE_CHECKING:
    from embedkit.training.model import ContrastiveModel

CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
# A Matryoshka run's checkpoints record what SimCSE's head reads: the pooled vectors, before the
# rotation. Earlier ones (the rotated vectors, prefixes trained by default) record nothing.
MATRYOSHKA_HEAD_READS = "pooled"
BASE: Literal["base"] = "base"  # the model folder is the untrained base model
Kept = int | Literal["base"] | None  # the step whose weights are kept, BASE, or None: the last weights
_STEP = re.compile(r"^step-(\d+)$")
_BEST = re.compile(r"^best-(\d+)$")


# --- where a run is: the `state` record of state.json -------------------------------------------------


@dataclass
class TrainState:
    """Where an `embedkit train` run is and what it has found so far."""

    step: int = 0
    base_score: float | None = None  # dev score of the untrained base model
    best_score: float | None = None  # best dev score of a trained checkpoint
    best_step: int | None = None
    last_losses: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # training time so far, summed over resumed parts

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrainState:
        return cls(**record)


@dataclass
class AdaptState:
    """Where an `embedkit adapt` run is: the step, and the dev scores (label -> value) of the base
    and the best."""

    step: int = 0
    selection: str = ""  # the label the best step is chosen on
    base_scores: dict[str, float] = field(default_factory=dict)
    best_scores: dict[str, float] = field(default_factory=dict)  # the best step's so far (none: empty)
    best_step: int | None = None  # the best step so far by `selection` (None: none evaluated yet)
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # (step, scores) each eval

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> AdaptState:
        return cls(**{**record, "history": [(int(st), sc) for st, sc in record.get("history", [])]})


State = TypeVar("State", TrainState, AdaptState)


# --- step-N: what a resume restores -------------------------------------------------------------------


class Extra(Protocol):
    """A job's own part of a checkpoint: files beside the shared ones, and entries of state.json."""

    def save(self, folder: Path) -> dict[str, Any]: ...

    def load(self, folder: Path, saved: dict[str, Any]) -> None: ...


@dataclass
class Parts:
    """Everything a checkpoint saves and a resume restores, travelling together."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler | None  # fp16 autocast only
    generators: dict[str, torch.Generator | None] = field(default_factory=dict)  # by name in rng.safetensors
    extra: Extra | None = None


@dataclass
class QueueFile:
    """Train's momentum queue: its rows in `queue.safetensors`, its counters in state.json's `queue`."""

    model: ContrastiveModel

    def save(self, folder: Path) -> dict[str, Any]:
        queue_state: dict[str, Any] = {}
        if self.model.queue is not None:
            queue_state = self.model.queue.state_dict()
            save_file({"buffer": queue_state.pop("buffer").contiguous()}, str(folder / "queue.safetensors"))
        return {"queue": queue_state}

    def load(self, folder: Path, saved: dict[str, Any]) -> None:
        queue = self.model.queue
        if queue is not None:
            queue_state = dict(saved.get("queue") or {})
            queue_state["buffer"] = load_file(str(folder / "queue.safetensors"))["buffer"]
            queue.load_state_dict(queue_state)
            queue.to(next(self.model.parameters()).device)


@dataclass
class CandidateVectors:
    """Adapt's hard negatives: the candidates' vectors as the last dev evaluation refreshed them
    (`doc_vectors.safetensors`), and the sampler that draws them (state.json's `sampler`)."""

    vectors: torch.Tensor  # (N, D)
    sampler: random.Random

    def save(self, folder: Path) -> dict[str, Any]:
        save_file(
            {"vectors": self.vectors.detach().cpu().contiguous()}, str(folder / "doc_vectors.safetensors")
        )
        version, internal, gauss = self.sampler.getstate()
        return {"sampler": [version, list(internal), gauss]}

    def load(self, folder: Path, saved: dict[str, Any]) -> None:
        vectors = load_file(str(folder / "doc_vectors.safetensors"))["vectors"]
        self.vectors.copy_(vectors.to(self.vectors.device))
        version, internal, gauss = saved["sampler"]
        self.sampler.setstate((version, tuple(internal), gauss))


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


def check_finite(model: nn.Module, step: int, advice: str = "lower the learning rate") -> None:
    """Refuse to checkpoint weights that are no longer finite (the last good one stays)."""
    for name, param in model.named_parameters():
        if not torch.isfinite(param).all():
            raise RunFailure(f"weight {name} is no longer finite after step {step}: {advice}")


def save_checkpoint(
    out_dir: Path,
    parts: Parts,
    state: TrainState | AdaptState,
    made_from: dict[str, Any],
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
    advice: str = "lower the learning rate",
) -> Path:
    """Write `step-N` atomically, then delete the checkpoints and best folders it supersedes.

    `made_from`: state.json's entries that a resume compares (settings, data, base model).
    `rank_rng`: with several ranks, every rank's torch RNG states (`distributed.gather_rng_states`).
    """
    check_finite(parts.model, state.step, advice)
    target = checkpoint_dir(out_dir) / f"step-{state.step:06d}"
    with atomic_dir(target) as tmp:
        save_model(parts.model, str(tmp / "model.safetensors"), force_contiguous=True)
        own = parts.extra.save(tmp) if parts.extra is not None else {}
        torch.save(parts.optimizer.state_dict(), tmp / "optimizer.pt")
        save_file(rng_tensors(parts.generators, rank_rng), str(tmp / "rng.safetensors"))
        payload = {
            "state": asdict(state),
            "scheduler": parts.scheduler.state_dict(),
            "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
            **own,
            **made_from,
        }
        (tmp / "state.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    prune_checkpoints(out_dir, keep_step=state.step, keep_best=state.best_step)
    return target


def load_checkpoint(
    path: Path, parts: Parts, state_type: type[State], rank: int | None = None, prune: bool = True
) -> State:
    """Restore everything `save_checkpoint` wrote into `parts`; return the run's state.

    Check first that the run may resume from it (`refuse_changed_settings` and the job's own
    checks). `rank`: this process's rank when several train together (its own torch RNG is restored
    where the checkpoint holds it, see `has_rank_rng`); `prune`: delete what the resumed run will
    redo (rank 0 only, so that the ranks do not race).
    """
    payload = read_json(path / "state.json")
    device = next(parts.model.parameters()).device
    load_model(parts.model, str(path / "model.safetensors"), device=str(device))
    if parts.extra is not None:
        parts.extra.load(path, payload)
    parts.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    parts.scheduler.load_state_dict(payload["scheduler"])
    if parts.scaler is not None and payload.get("scaler"):
        parts.scaler.load_state_dict(payload["scaler"])
    restore_rng(load_file(str(path / "rng.safetensors")), parts.generators, rank)
    state = state_type.from_record(payload["state"])
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


def refuse_changed_settings(
    saved: dict[str, Any], current: dict[str, Any], may_change: frozenset[str]
) -> None:
    """`InputError` naming every setting that differs from the checkpoint's, but those in `may_change`
    (they change no number the run computes)."""
    changed = [
        f"{k} {saved.get(k)!r} -> {current[k]!r}"
        for k in current
        if k not in may_change and saved.get(k) != current[k]
    ]
    if changed:
        raise InputError(f"cannot resume with other settings than the checkpoint's: {'; '.join(changed)}")


def check_train_resumable(path: Path, config: TrainConfig, made_from: dict[str, Any]) -> None:
    """`InputError` when the checkpoint was made from other data, another base or other settings."""
    meta = read_json(path / "state.json")
    if meta.get("data_fingerprint") != made_from["data_fingerprint"]:
        raise InputError("cannot resume: the training sentences differ from the checkpoint's")
    if meta.get("base_fingerprint") != made_from["base_fingerprint"]:
        raise InputError("cannot resume: the base model differs from the one the checkpoint started from")
    recorded = meta.get("config", {})
    if recorded.get("matryoshka_dims") and meta.get("matryoshka_head_reads") != MATRYOSHKA_HEAD_READS:
        raise InputError(
            "cannot resume: the checkpoint's Matryoshka training is an earlier embedkit's (another "
            "head input, default weights and queue); train again without --resume"
        )
    saved = TrainConfig.from_dict(recorded).to_dict()
    refuse_changed_settings(saved, config.to_dict(), TrainConfig.RESUMABLE_CHANGES)


class ResumableSettings(Protocol):
    """A run's settings as a checkpoint records them (`AdaptConfig`), and those a resume may change."""

    RESUMABLE_CHANGES: ClassVar[frozenset[str]]

    def to_dict(self) -> dict[str, Any]: ...


def check_adapt_resumable(path: Path, config: ResumableSettings, made_from: dict[str, Any]) -> None:
    """`InputError` when the checkpoint was made from another index, model, queries or settings."""
    saved = read_json(path / "state.json")
    refuse_changed_settings(saved.get("config", {}), config.to_dict(), config.RESUMABLE_CHANGES)
    for key, what in (("index", "the index's documents or vectors"), ("queries", "the pseudo queries")):
        if saved.get(key) != made_from[key]:
            raise InputError(f"cannot resume: {what} differ from the checkpoint's ({path})")


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


# --- best-N: the weights the model folder is made of -------------------------------------------------


def best_dir(out_dir: Path, step: int) -> Path:
    return checkpoint_dir(out_dir) / f"best-{step:06d}"


@dataclass(frozen=True)
class BestWeights:
    """Where a run keeps the weights of its dev improvements: `module`'s weights, as `file_name`.

    Train keeps the backbone alone (the model folder holds no training head); adapt its whole student.
    """

    run_dir: Path
    module: nn.Module
    file_name: str
    base_path: Path  # the base model's folder: the weights given back when no step may replace them

    def save(self, step: int, record: dict[str, object]) -> None:
        """`best-N/` with the weights and `best.json` (the step and `record`)."""
        with atomic_dir(best_dir(self.run_dir, step)) as tmp:
            save_model(self.module, str(tmp / self.file_name), force_contiguous=True)
            text = json.dumps({"step": step, **record}) + "\n"
            (tmp / "best.json").write_text(text, encoding="utf-8")

    def load(self, step: int) -> None:
        path = best_dir(self.run_dir, step) / self.file_name
        if not path.is_file():
            raise RunFailure(f"the best weights of step {step} are missing: {path}")
        load_model(self.module, str(path), device=str(next(self.module.parameters()).device))

    def load_base(self) -> None:
        from embedkit.encode.torch_backend import load_backbone

        self.module.load_state_dict(load_backbone(self.base_path).state_dict())


# --- the metrics log -----------------------------------------------------------------------------------


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
