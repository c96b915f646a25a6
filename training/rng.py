"""The random generators' states a checkpoint keeps, so that a resumed run draws what it would have.

torch's own streams (CPU and every CUDA device; with several ranks, each rank's, gathered by
`distributed.gather_rng_states`) and the job's named generators (AMI's sampler, the auxiliary
network's masking) go into `rng.safetensors` as tensors, by name.
"""

from __future__ import annotations

import torch


def rng_tensors(
    generators: dict[str, torch.Generator | None],
    rank_rng: list[dict[str, torch.Tensor]] | None = None,
) -> dict[str, torch.Tensor]:
    """torch's RNG states (every rank's, with `rank_rng`) and those of `generators` by name."""
    if rank_rng is None:
        tensors = {"torch_cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            for i, rng in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"torch_cuda_{i}"] = rng
    else:  # rank 0's stream also under the single-process name, for a resume on one process
        tensors = {"torch_cpu": rank_rng[0]["torch_cpu"].clone()}
        for rank, states in enumerate(rank_rng):
            tensors.update({f"rank{rank}_{name}": state for name, state in states.items()})
    for name, generator in generators.items():
        if generator is not None:
            tensors[name] = generator.get_state()
    return {k: v.contiguous() for k, v in tensors.items()}


def restore_rng(
    tensors: dict[str, torch.Tensor], generators: dict[str, torch.Generator | None], rank: int | None = None
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
    for name, generator in generators.items():
        if generator is not None and name in tensors:
            generator.set_state(tensors[name])


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


__all__ = ["restore_rng", "rng_tensors"]
