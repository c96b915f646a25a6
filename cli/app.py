"""The `embedkit` application: one module per command, joined here.

Command modules import only typer and the standard library at the top; torch, transformers,
onnxruntime and faiss are imported inside the command bodies so that `embedkit --help` is instant.
"""

from __future__ import annotations

import warnings

import typer

app = typer.Typer(
    name="embedkit",
    help="Train in-domain sentence encoders with miCSE, export them to ONNX, embed, index, search, evaluate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from embedkit.cli import embed, evaluate, experiment, export, index, search, serve, train

    for module in (train, export, embed, index, search, serve, evaluate, experiment):
        module.register(app)


_register()


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    # The library warns (a CPU fallback, say) through `warnings`; a CLI user gets one line, no source.
    return f"warning: {message}\n"


def main() -> None:
    warnings.formatwarning = _one_line_warning
    app()


if __name__ == "__main__":
    main()
