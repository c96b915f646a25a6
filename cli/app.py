"""The `embedkit` application: one module per command, joined here.

A command's module is imported only when that command runs (or its help is asked for): a cold
`embedkit search` loads the search command alone, not the training, export and server commands
beside it. `embedkit --help` lists the commands from `COMMANDS` and their one-line summaries
without importing any. Command modules import only typer and the standard library at the top;
torch, transformers, onnxruntime and faiss are imported inside the command bodies.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from embedkit.cli import plain_values
from embedkit.cli.help_format import SUMMARIES, name_values
from embedkit.console_quiet import quiet_other_libraries

try:  # typer 0.29+ carries its own copy of click
    from typer._click import exceptions as _click_errors
except ImportError:  # older typer: click itself
    from click import exceptions as _click_errors


# command -> the module of embedkit.cli that registers it, in the order `embedkit --help` lists
# them, the order a user meets them: searching documents first, training after
COMMANDS = {
    "index": "index",
    "search": "search",
    "serve": "serve",
    "delete": "delete",
    "compact": "compact",
    "calibrate": "calibrate",
    "verify": "verify",
    "push": "push",
    "embed": "embed",
    "train": "train",
    "adapt": "adapt",
    "export": "export",
    "experiment": "experiment",
    "clean": "clean",
    "eval": "evaluate",  # a group of commands: listed after the single ones, as typer lists groups
}


@functools.cache
def loaded_command(name: str) -> Any:
    """The click command `name`, its module imported and registered now (once per process)."""
    module = importlib.import_module(f"embedkit.cli.{COMMANDS[name]}")
    holder = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    module.register(holder)
    command = typer.main.get_group(holder).commands[name]
    command.short_help = command.short_help or SUMMARIES.get(name)
    name_values(command)
    plain_values.install(command)
    return command


class OneLineErrors(TyperGroup):
    """Usage errors (`-k 0`, a missing `--out`) as one `error:` line and exit 2, like all bad input;
    commands loaded on first use (`COMMANDS`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx: Any, name: str) -> Any:
        if name in COMMANDS and name not in self.commands:
            self.commands[name] = loaded_command(name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list with each command's summary, no command module imported."""
        rows = [(name, SUMMARIES[name]) for name in COMMANDS if name in SUMMARIES]
        if len(rows) < len(COMMANDS):  # a command without a summary: click's own listing
            super().format_commands(ctx, formatter)
            return
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        quiet_other_libraries()
        name_values(self)
        plain_values.install(self)
        from embedkit.cli.common import GuardedStdout, StdoutFailure

        stdout = sys.stdout
        guard = GuardedStdout(stdout) if stdout is not None else None  # None: started with it closed
        if guard is not None:
            sys.stdout = guard  # type: ignore[assignment]
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
            if guard is not None:
                guard.flush()  # here, not at exit, so that a failure is one line
        except StdoutFailure as exc:  # results that could not be written, in or out of a command
            typer.echo(f"error: {exc}", err=True)
            if guard is not None:
                guard.silence()
            if not standalone_mode:
                raise
            sys.exit(exc.exit_code)
        except _click_errors.UsageError as exc:
            message = " ".join(exc.format_message().split())
            command = exc.ctx.command_path if exc.ctx is not None else "embedkit"
            if message == "Missing command." and exc.ctx is not None:  # `embedkit`, `embedkit eval`
                names = exc.ctx.command.list_commands(exc.ctx)  # type: ignore[attr-defined]
                message = f"missing command: {command} COMMAND [ARGS]..., COMMAND one of {', '.join(names)}"
            typer.echo(f"error: {message} (see {command} --help)", err=True)
            if not standalone_mode:
                raise
            sys.exit(2)
        except _click_errors.ClickException as exc:
            typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            if not standalone_mode:
                raise
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("interrupted", err=True)
            if not standalone_mode:
                raise
            sys.exit(130)
        finally:
            sys.stdout = stdout
        if standalone_mode:
            sys.exit(result if isinstance(result, int) else 0)
        return result


app = typer.Typer(
    cls=OneLineErrors,
    name="embedkit",
    help=(
        "Search your own documents by meaning as well as by their words, on your own machine.\n\n"
        "\b\n"
        "  embedkit index my-docs/ --out my-index   # .txt .md .pdf .html .docx files\n"
        "  embedkit search my-index \"your question\"\n"
        "  embedkit serve --index my-index          # a search page on port 8000\n\n"
        "It also trains the model on your own text (miCSE), exports it to ONNX and measures "
        "retrieval (eval)."
    ),
    no_args_is_help=False,  # a bare `embedkit` is a usage error: one line, exit 2
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help, as git and ruff print theirs: rich's boxed panels squeeze option text into a
    # narrow column at 80 characters and cut defaults off
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        from embedkit.versions import version_lines

        typer.echo("\n".join(version_lines()))
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the versions of embedkit, torch, onnxruntime (with its providers), faiss and "
            "tantivy, then exit.",
        ),
    ] = False,
) -> None:
    # no docstring: the help stays the app's own
    pass


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
