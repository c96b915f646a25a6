"""What keeps a training step bound by the GPU's arithmetic rather than by launches and host syncs.

On a GPU the host queues a step's kernels ahead of the device, unless something makes it wait:
reading a loss (`.item()`, `float(tensor)`), copying from pageable memory, or a new input shape
for a compiled graph. So, on CUDA:

- batches are padded to the fixed `max_seq_length` (`fixed_shapes`), one shape for the whole run;
- token ids go up through pinned memory without blocking (`to_device`);
- the loss terms stay on the device and are read every `log_steps` steps (`LossReader`), with the
  first non-finite step still found exactly;
- nothing between the batch's copy and the momentum update reads a tensor on the host or makes a
  shape from its values (tests/training/test_no_host_sync.py): the attention's padding mask is always
  formed (`attention_maps.FUSED_ATTENTION`), AMI masks instead of selecting, InfoCSE's auxiliary
  MLM predicts a fixed number of slots, the masked positions first (`infocse.prediction_slots`), and
  its dropout seeds come from a host generator; fp16's GradScaler alone still reads (whether a step
  overflowed), bf16 has no scaler;
- torch.compile of the step's forward passes and loss terms (`compile_model`): by default
  `reduce-overhead`, which replays them (and their backward) as CUDA graphs at the fixed shapes
  (`compile_mode`; not yet measured on a GPU); the optimizer is one fused kernel, not in a graph;
- AdamW is the fused kernel (`optimizer.make_optimizer`), and the momentum encoder's forward runs
  on a stream of its own (`side_stream`): it reads neither view, so it overlaps the loss and the
  backward pass.

On the CPU there is nothing to overlap: reads cost nothing and padding costs arithmetic, so the
defaults keep the step as it was (a read every step, batches padded to their longest sentence).
The momentum encoder's fused EMA and the queue on the device are in `momentum`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from embedkit.errors import InputError
from embedkit.training.config import TrainConfig

# Steps between loss reads on CUDA when log_steps is not set: a read waits for the GPU to finish
# the queued work, so one read in 50 steps leaves the host ahead of the device 98% of the time.
CUDA_LOG_STEPS = 50


def log_every(config: TrainConfig, device: torch.device) -> int:
    """Steps between loss reads (and metrics records): `log_steps`, else 1 on CPU, 50 on CUDA."""
    if config.log_steps is not None:
        return config.log_steps
    return CUDA_LOG_STEPS if device.type == "cuda" else 1


def fixed_shapes(config: TrainConfig, device: torch.device) -> bool:
    """Pad every batch to `max_seq_length`: `pad_to_max_length`, else on CUDA only."""
    if config.pad_to_max_length is not None:
        return config.pad_to_max_length
    return device.type == "cuda"


def to_device(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """numpy arrays as tensors on `device`; to CUDA through pinned memory, without waiting.

    A copy from pageable memory makes the host wait until the device has run what is queued before
    it; from pinned memory the copy is queued like a kernel (torch keeps the pinned block alive until
    the copy is done).
    """
    if device.type != "cuda":
        return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    return {k: torch.from_numpy(v).pin_memory().to(device, non_blocking=True) for k, v in arrays.items()}


def check_compile(mode: str, device: torch.device) -> None:
    """`InputError` for a compile mode other than off (or auto) on a device other than CUDA."""
    if mode not in ("off", "auto") and device.type != "cuda":
        raise InputError(f"compile={mode} needs a CUDA device: leave it off on the {device.type}")


def compile_mode(mode: str, device: torch.device) -> str:
    """The torch.compile mode a run uses: `mode`, with auto = reduce-overhead (CUDA graphs) on CUDA
    and off elsewhere."""
    check_compile(mode, device)
    if mode != "auto":
        return mode
    return "reduce-overhead" if device.type == "cuda" else "off"


def side_stream(device: torch.device) -> torch.cuda.Stream | None:
    """A CUDA stream for the momentum encoder's forward beside the step's own; None off CUDA."""
    return torch.cuda.Stream(device) if device.type == "cuda" else None


def compile_model(model: Any, mode: str, device: torch.device) -> bool:
    """torch.compile the forward passes and the loss terms of one step (`ContrastiveModel.runners`;
    their backward passes are compiled with them); False for `off`.

    CUDA only: there it removes the launches the step is bound by; on the CPU the compile itself
    takes minutes and the step is bound by arithmetic. The compiled callables wrap the same modules,
    so the state dict, checkpoints and the dev evaluation (eager) are unchanged. Dropout stays
    random: inductor draws each call's masks from a seed taken from torch's generator. On CUDA,
    unless the momentum encoder is a CUDA graph (reduce-overhead, whose replays are cheap and keep
    to the stream they were recorded on), its forward goes on a side stream (`side_stream`).
    """
    mode = compile_mode(mode, device)
    if model.momentum is not None and mode != "reduce-overhead":
        model.momentum_stream = side_stream(device)
    if mode == "off":
        return False
    options: dict[str, Any] = {} if mode == "default" else {"mode": mode}
    model.runners["backbone"] = torch.compile(model.backbone, **options)
    if model.momentum is not None:
        model.runners["momentum"] = torch.compile(model.momentum, **options)
    # the loss terms too; AMI's draws from its own generator break the graph there
    model.runners["objective"] = torch.compile(model.objective, **options)
    return True


class LossReader:
    """The loss terms of the steps since the last read, kept on the device until `read`.

    `add` records a step's total and terms without reading them (no host sync) and tracks, on the
    device, the first step whose total was not finite; `read` brings the latest terms and that step
    to the host, one sync for all the steps since the last read.
    """

    def __init__(self) -> None:
        self._latest: tuple[torch.Tensor, dict[str, torch.Tensor]] | None = None
        self._first_bad: torch.Tensor | None = None  # 0 while every total was finite

    def add(self, step: int, total: torch.Tensor, terms: dict[str, torch.Tensor]) -> None:
        self._latest = (total, terms)
        if self._first_bad is None:
            self._first_bad = torch.zeros((), dtype=torch.int64, device=total.device)
        bad = ~torch.isfinite(total) & (self._first_bad == 0)
        self._first_bad = torch.where(bad, step, self._first_bad)

    def read(self) -> tuple[dict[str, float], int | None]:
        """The latest step's terms (`loss` first) and the first non-finite step since the start."""
        if self._latest is None or self._first_bad is None:
            raise RuntimeError("LossReader.read before any step was added")
        total, terms = self._latest
        values = torch.stack([total.float(), *(v.float() for v in terms.values()), self._first_bad.float()])
        *losses, first_bad = values.tolist()  # the one host sync
        read = dict(zip(["loss", *terms], losses, strict=True))
        return read, int(first_bad) or None


class Throughput:
    """Sentences per second between two reads (the device has caught up at each read)."""

    def __init__(self) -> None:
        self._since = time.perf_counter()
        self._sentences = 0

    def add(self, sentences: int) -> None:
        self._sentences += sentences

    def rate(self) -> float:
        """Sentences per second since the last call (or the start); restarts the count."""
        now = time.perf_counter()
        rate = self._sentences / max(now - self._since, 1e-9)
        self._since, self._sentences = now, 0
        return rate


__all__ = [
    "CUDA_LOG_STEPS",
    "LossReader",
    "Throughput",
    "check_compile",
    "compile_mode",
    "compile_model",
    "fixed_shapes",
    "log_every",
    "side_stream",
    "to_device",
]
