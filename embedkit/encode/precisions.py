"""The ONNX precisions an export may hold, and the file each is stored in: the one list of them.

`embedkit export` writes them, the ONNX encoder loads them, `embed`/`serve --precision` name them
and the parity gate judges them; each reads this module. (Training's dtypes, `fp32/bf16/fp16`
under `--precision` of `train`, are another vocabulary: `embedkit.training.config`.)
"""

from __future__ import annotations

from embedkit.errors import InputError

PRECISION_FILES = {"fp32": "model.onnx", "fp16": "model_fp16.onnx", "int8": "model_int8.onnx"}
ONNX_PRECISIONS = tuple(PRECISION_FILES)


def check_precision(precision: str | None) -> str | None:
    """`precision` if it names an ONNX precision (None: the export's default), else an `InputError`."""
    if precision is not None and precision not in PRECISION_FILES:
        raise InputError(f"unknown precision {precision!r}: use one of {', '.join(ONNX_PRECISIONS)}")
    return precision
