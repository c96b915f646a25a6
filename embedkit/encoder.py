"""One way to open any model folder for embedding: `load_encoder`.

An exported ONNX folder is run with ONNX Runtime (`embedkit.onnx_encoder.OnnxEncoder`), a trained or
Hugging Face folder with torch (`embedkit.training.encoder.TorchEncoder`). Both are imported only
when their kind of folder is opened, so serving an ONNX model never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from embedkit.errors import InputError
from embedkit.modelfolder import read_model_spec

# The ONNX precisions an export may hold (model.onnx, model_fp16.onnx, model_int8.onnx).
ONNX_PRECISIONS = ("fp32", "fp16", "int8")


@runtime_checkable
class Encoder(Protocol):
    """What every backend offers: `TorchEncoder` and `OnnxEncoder` both satisfy it."""

    backend: str  # "torch" or "onnx"
    path: Path  # the model folder
    dim: int
    max_seq_length: int

    @property
    def device(self) -> Any:  # where the model runs, printable ("cpu", "cuda", a torch.device)
        ...

    @property
    def fingerprint(self) -> str:  # the weights' fingerprint; an ONNX export records its source's
        ...

    @property
    def truncated(self) -> int:  # texts cut at max_seq_length so far
        ...

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray:  # float32 [n, dim] in the caller's order, or [dim] for one string
        ...


def check_device(device: str) -> str:
    """Reject device names no backend understands before any model is loaded."""
    if device in ("auto", "cpu") or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    raise InputError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")


def load_encoder(
    path: str | Path | None = None,
    device: str = "auto",
    precision: str | None = None,
) -> Encoder:
    """Open a model folder for embedding, whatever its kind.

    `path`: an ONNX export (`embedkit export`), a trained or Hugging Face folder, or None for the
    bundled all-MiniLM-L6-v2. `device`: "auto" (CUDA when the backend can really run on it, else
    CPU), "cpu", or "cuda"/"cuda:N" (an `InputError` when CUDA is not usable, never a silent CPU run).
    `precision`: for ONNX folders, one of fp32, fp16, int8 (None: the export's default); a torch
    folder runs in fp32 only.

    >>> encoder = load_encoder("runs/my-model-onnx")  # doctest: +SKIP
    >>> encoder.encode(["a sentence", "another"]).shape  # doctest: +SKIP
    (2, 384)
    """
    device = check_device(device)
    if precision is not None and precision not in ONNX_PRECISIONS:
        raise InputError(f"unknown precision {precision!r}: use {', '.join(ONNX_PRECISIONS)}")
    spec = read_model_spec(path)
    if spec.kind == "onnx":
        from embedkit.onnx_encoder import OnnxEncoder

        return OnnxEncoder(spec.path, device=device, precision=precision)
    if precision not in (None, "fp32"):
        raise InputError(
            f"precision {precision} needs an ONNX export; {spec.path} is a torch folder "
            "(export it with `embedkit export`)"
        )
    from embedkit.training.encoder import TorchEncoder

    return TorchEncoder(spec.path, device=device)


def device_name(encoder: Encoder) -> str:
    """The device as users write it ("cpu", "cuda:0"), for reports and CLI output."""
    return str(encoder.device)
