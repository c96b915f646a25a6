"""What every `embedkit eval` command shares: loading the model, its label and record, checked outputs,
and printing (tables folded for a terminal)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder
    from embedkit.encode.runtime import Runtime


def load_model(model: str | None, runtime: Runtime) -> Encoder:
    from embedkit.encode.loading import load_encoder

    return load_encoder(model, runtime=runtime)


def encoder_label(encoder: Encoder) -> str:
    from embedkit.encode.default_onnx import recorded_model_path
    from embedkit.encode.model_folder import DEFAULT_BASE_MODEL, default_base_model_path
    from embedkit.errors import InputError

    name = Path(encoder.path).name or "model"
    try:
        if recorded_model_path(encoder) == default_base_model_path().resolve():
            name = DEFAULT_BASE_MODEL
    except InputError:  # the bundled model's package is absent: this is not it
        pass
    return f"{name} ({encoder.backend}, {encoder.device})"


def model_record(encoder: Encoder) -> dict[str, Any]:
    return {
        "model": str(encoder.path),
        "fingerprint": encoder.fingerprint,
        "backend": encoder.backend,
        "device": str(encoder.device),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    from embedkit.storage.atomic import write_json_atomic

    write_json_atomic(path, data)


def check_outputs(inputs: list[Any], *paths: Path | None) -> None:
    """Fail before the work, not after it, when an output cannot be written or is an input."""
    from embedkit.cli.common import check_io
    from embedkit.errors import InputError

    for path in paths:
        if path is not None and path.is_dir():
            raise InputError(f"output {path} is a folder; give a file name")
    check_io(inputs=inputs, files=paths)


def interactive() -> bool:
    return sys.stdout.isatty()


def print_out(renderable: Any) -> None:
    from rich.table import Table

    from embedkit.console import make_console, print_table

    console = make_console()
    if isinstance(renderable, Table):
        print_table(console, renderable)
    else:
        console.print(renderable)
