"""One device resolver for every backend: the names users write, and what torch makes of them.

`check_device` validates a name without importing any backend (the ONNX path must not import
torch); `torch_device` turns it into a `torch.device`. `cuda` that cannot be had is an
`InputError`, never a silent CPU run.
"""

from __future__ import annotations

from typing import Any

from embedkit.errors import InputError

DEVICE_HELP = "use auto, cpu, cuda or cuda:N"


def check_device(device: str) -> str:
    """Reject device names no backend understands before any model is loaded."""
    if device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    raise InputError(f"unknown device {device!r}: {DEVICE_HELP}")


def torch_device(device: str = "auto") -> Any:  # -> torch.device
    """`auto` picks CUDA when torch sees a GPU; `cuda` without one is an `InputError`."""
    import torch

    device = check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InputError(f"--device {device}: torch sees no CUDA GPU (use --device cpu or auto)")
    return torch.device(device)
