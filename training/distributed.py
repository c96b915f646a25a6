"""One run over several processes: DistributedDataParallel on the ranks torchrun starts.

`torchrun --nproc-per-node N -m embedkit.cli train ...` (or `embedkit train --nproc N`, which runs
torchrun for you) starts N copies of the trainer. Each joins the process group from torchrun's
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) in `setup`: on CUDA, rank r
trains on cuda:LOCAL_RANK with NCCL; otherwise on the CPU with gloo. One rank (WORLD_SIZE 1, or
no torchrun) is the plain single-process run, with no process group at all.

What is split and what is shared, so that N ranks compute the single-process step:

- Every global batch (``--batch-size`` rows, in the single-process order) is cut into N consecutive
  slices; rank r embeds the r-th (`BatchShard`).
- In-batch negatives: the two views' vectors are all-gathered with this rank's slice kept in place,
  so gradients flow through the rows this rank computed (SimCSE's code, `gather_with_grad`). Every
  rank computes InfoNCE over the whole global batch, but backpropagates only through its own rows;
  the sum over ranks of those partial gradients is the single-process gradient, and since DDP
  *averages* the ranks' gradients, the loss each rank backpropagates is N x the batch loss (as
  SimCSE's and MoCo v3's distributed code scale it).
- The momentum keys are all-gathered without gradient before they enter the queue, as MoCo's
  `concat_all_gather`, so every rank holds the single-process queue.
- Per-sentence terms (AMI, InfoCSE's auxiliary MLM) stay local: a rank's share is the sum over its
  rows divided by the count over all ranks (one all-reduce), so the shares add up to the
  single-process mean.
- Random draws made per row (AMI's sampling, the MLM masking) are drawn for the whole global batch
  on every rank, each keeping its rows (`BatchShard.draw`): their generators stay identical across
  ranks and equal to the single-process run's, so checkpoints resume on any number of ranks.
- Dropout masks come from each rank's own torch RNG: rank 0 keeps the single-process stream, rank
  r > 0 is seeded from (seed, r) (`rank_seed`), so the ranks do not repeat each other's masks.
- The EMA update of the momentum encoder is local: DDP keeps the online weights equal on every
  rank, so the momentum weights stay equal too.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from embedkit.errors import InputError, RunFailure


@dataclass(frozen=True)
class Context:
    """This process's place in the run: its rank among `world_size`, and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None  # nccl or gloo; None: one process, no process group
    owns_group: bool = False  # `setup` created the process group, so `cleanup` destroys it

    @property
    def is_main(self) -> bool:
        """Rank 0 alone evaluates, writes checkpoints, metrics and the model folder, and shows progress."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_world_size() -> int:
    """WORLD_SIZE as torchrun sets it; 1 outside torchrun."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def setup(device_name: str, timeout_s: float) -> Context:
    """Join torchrun's process group (when WORLD_SIZE > 1) and pick this rank's device.

    The group's `timeout_s` bounds how long a rank waits for the others at any collective (rank 0's
    dev evaluation and checkpoint writing included), so a rank that hangs fails the job instead of
    stalling it. A process group that the caller already initialised is used as it is.
    """
    from embedkit.encode.devices import check_device, torch_device

    if env_world_size() == 1 and not (dist.is_available() and dist.is_initialized()):
        return Context(device=torch_device(device_name))
    if not dist.is_available():
        raise InputError("this torch build has no torch.distributed: train with one process")
    check_device(device_name)
    if device_name.startswith("cuda:"):
        raise InputError(
            f"--device {device_name}: with several ranks each takes cuda:LOCAL_RANK; "
            "use --device cuda or auto"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device_name != "cpu" and torch.cuda.is_available()
    if device_name == "cuda" and not cuda:
        raise InputError("--device cuda: torch sees no CUDA GPU (use --device cpu or auto)")
    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise InputError(
                f"rank with LOCAL_RANK {local_rank} has no GPU: torch sees {torch.cuda.device_count()}; "
                "start at most one rank per GPU"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    return Context(
        dist.get_rank(), dist.get_world_size(), local_rank, device, dist.get_backend(), owns_group=owns
    )


def cleanup(context: Context) -> None:
    """Leave the process group `setup` created (a caller's own group is left alone)."""
    if context.owns_group and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def session(device_name: str, timeout_s: float) -> Iterator[Context]:
    """`setup` for the length of a run, then `cleanup`; an error that comes from a rank losing
    contact with the others becomes `LostContact` (one line, not torch's traceback)."""
    context = setup(device_name, timeout_s)
    try:
        yield context
    except Exception as exc:
        failure = lost_contact(exc, context)
        if failure is not None:
            raise failure from None
        raise
    finally:
        cleanup(context)


def barrier(context: Context) -> None:
    """Wait for every rank (a no-op for one process)."""
    if context.distributed:
        if context.backend == "nccl":
            dist.barrier(device_ids=[context.device.index])
        else:
            dist.barrier()


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The torch seed of rank `rank` > 0 (dropout masks): a function of (seed, rank, step), 64 bits."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0])


def is_communication_failure(exc: BaseException) -> bool:
    """True for the errors a collective raises when a peer died or timed out."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    markers = ("Connection closed by peer", "Connection reset by peer", "gloo", "NCCL", "timed out")
    return isinstance(exc, RuntimeError) and any(m in text for m in markers)


class LostContact(RunFailure):
    """A rank's collective failed: another rank died or hung (the cause is usually elsewhere)."""

    lost_contact = True


def lost_contact(exc: BaseException, context: Context) -> LostContact | None:
    """The one-line failure of a rank whose collective failed because a peer died or hung; else None."""
    if not (context.distributed and is_communication_failure(exc)):
        return None
    # without the C++ source location ("[.../gloo/transport/tcp/pair.cc:553] Connection closed ...")
    reason = re.sub(r"\[[^\]]*\.(?:cc|cpp|h):\d+\]\s*", "", " ".join(str(exc).split()))[:160]
    return LostContact(
        f"rank {context.rank} lost contact with the other ranks ({reason}): one of them stopped or was "
        "killed; the last checkpoint stays, and --resume continues from it"
    )


def gather_rng_states(context: Context) -> list[dict[str, torch.Tensor]]:
    """Every rank's torch RNG states (CPU, and this rank's CUDA device), in rank order; call on all ranks."""
    own = {"torch_cpu": torch.get_rng_state()}
    if context.device.type == "cuda":
        own["torch_cuda"] = torch.cuda.get_rng_state(context.device)
    if not context.distributed:
        return [own]
    gathered: list[dict[str, torch.Tensor]] = [{} for _ in range(context.world_size)]
    for name, state in own.items():
        local = state.to(context.device)
        parts = [torch.empty_like(local) for _ in range(context.world_size)]
        dist.all_gather(parts, local)
        for rank, part in enumerate(parts):
            gathered[rank][name] = part.cpu()
    return gathered


@dataclass(frozen=True)
class BatchShard:
    """How one global batch is split over the ranks: rank `rank` holds rows [start, stop) of `sizes`.

    The collectives below are identities for one rank, so the model's step reads the same with one
    process or many. `blocks` > 1 describes a local tensor made of several such slices one after
    another (the doubled batch [x; x] of the dropout views: each half is this rank's rows of its
    global half).
    """

    rank: int
    sizes: tuple[int, ...]
    blocks: int = 1

    @classmethod
    def whole(cls, rows: int) -> BatchShard:
        """One process holding the whole batch."""
        return cls(0, (rows,))

    @classmethod
    def split(cls, rows: int, context: Context) -> BatchShard:
        """Consecutive slices; where `rows` does not divide by the world size the first ranks get one more."""
        base, extra = divmod(rows, context.world_size)
        sizes = tuple(base + (1 if r < extra else 0) for r in range(context.world_size))
        return cls(context.rank, sizes)

    @property
    def world_size(self) -> int:
        return len(self.sizes)

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def start(self) -> int:
        return sum(self.sizes[: self.rank])

    @property
    def stop(self) -> int:
        return self.start + self.sizes[self.rank]

    def doubled(self) -> BatchShard:
        """The shard of the doubled batch [x; x]."""
        return BatchShard(self.rank, self.sizes, 2 * self.blocks)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """This rank's part of the global batch's row indices."""
        return rows[self.start : self.stop]

    def draw(self, make: Callable[[tuple[int, ...]], torch.Tensor], shape: Sequence[int]) -> torch.Tensor:
        """`make(shape)` for the local rows, as this rank's rows of the draw one process makes for the
        whole batch: every rank draws the global tensor, so the generator advances alike everywhere.
        """
        shape = tuple(shape)
        if self.world_size == 1:
            return make(shape)
        if shape[0] != self.blocks * self.sizes[self.rank]:
            raise ValueError(f"a local draw of {shape[0]} rows does not fit this shard ({self})")
        full = make((self.blocks * self.total, *shape[1:]))
        parts = [full[b * self.total + self.start : b * self.total + self.stop] for b in range(self.blocks)]
        return parts[0] if self.blocks == 1 else torch.cat(parts)

    def _all_gather(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's rows of `x` (no gradient); unequal slices travel padded to the largest."""
        width = max(self.sizes) * self.blocks
        local = x.detach()
        if local.shape[0] < width:
            local = torch.cat([local, local.new_zeros(width - local.shape[0], *local.shape[1:])])
        parts = [torch.empty_like(local) for _ in self.sizes]
        dist.all_gather(parts, local.contiguous())
        return [part[: size * self.blocks] for part, size in zip(parts, self.sizes, strict=True)]

    def gather_with_grad(self, x: torch.Tensor) -> torch.Tensor:
        """All ranks' rows of `x` (B, ...) in rank order, this rank's slot the local tensor itself, so
        that the gradient flows through the rows computed here (SimCSE's distributed code)."""
        if self.world_size == 1:
            return x
        if self.blocks != 1:
            raise ValueError("gather_with_grad takes one block of rows")
        parts = self._all_gather(x)
        parts[self.rank] = x
        return torch.cat(parts)

    @torch.no_grad()
    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """All ranks' rows of `x` in rank order, without gradient (MoCo's `concat_all_gather`)."""
        if self.world_size == 1:
            return x
        if self.blocks != 1:
            raise ValueError("gather takes one block of rows")
        return torch.cat(self._all_gather(x))

    @torch.no_grad()
    def all_sum(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of `x` over the ranks (no gradient); `x` itself for one rank."""
        if self.world_size == 1:
            return x
        total = x.detach().clone()
        dist.all_reduce(total)
        return total


def data_parallel(model: torch.nn.Module, context: Context) -> torch.nn.Module:
    """The model (a `ContrastiveModel`) itself for one process; else wrapped in DistributedDataParallel.

    DDP broadcasts rank 0's weights (the auxiliary network's stage 1 included) and buffers at
    construction; buffers (position ids) never change, so they are not broadcast each step. The
    graph is the same every step, and the backbone's pooler is never used: a static graph lets DDP
    skip the unused parameters without searching the graph each step.
    """
    if not context.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [context.device.index] if context.device.type == "cuda" else None
    # newer torch names broadcast_buffers=False forward_sync_buffers=False (and warns on the old name)
    parameters = inspect.signature(DistributedDataParallel).parameters
    no_sync = {"forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=device_ids, static_graph=True, **no_sync)


__all__ = [
    "LostContact",
    "BatchShard",
    "Context",
    "barrier",
    "cleanup",
    "env_world_size",
    "gather_rng_states",
    "data_parallel",
    "is_communication_failure",
    "lost_contact",
    "rank_seed",
    "session",
    "setup",
]
