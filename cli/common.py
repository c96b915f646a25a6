"""What every command shares: turning library errors into one line and an exit code, checking its
inputs and outputs, and the truncation note of the commands that embed."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from embedkit.errors import EmbedkitError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as one line on stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def check_io(inputs: Any = (), files: Any = (), folders: Any = (), wait: bool = False) -> None:
    """Every command's first step: outputs writable and none of them an input; `--wait` for busy ones."""
    from embedkit.storage.locking import set_waiting
    from embedkit.storage.outputs import check_io as check

    check(inputs, files, folders)
    set_waiting(wait)


def handle_errors(func: F) -> F:
    """Run a command, mapping `EmbedkitError` to its exit code (2 input, 1 failure) and one line.

    Ctrl-C exits 130 without a traceback; anything else is a bug and keeps its traceback.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EmbedkitError as exc:
            raise fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code) from None
        except OSError as exc:  # a write outside embedkit's atomic writers (a lock file, a cache)
            from embedkit.storage.write_failures import WriteFailure, write_errno

            code = write_errno(exc)
            if code is None or not exc.filename:
                raise
            raise fail(str(WriteFailure(code, os.fsdecode(exc.filename))), 1) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def print_truncated(console: Any, truncated: int, what: str = "documents", hint: str = "") -> None:
    """The note, on a rich `console`, that `truncated` documents were cut at the model's maximum length."""
    if truncated:
        console.print(f"{truncated:,} {what} were longer than the model's maximum length and truncated{hint}")


def check_search_choices(mode: str | None, fusion: str, alpha: float) -> None:
    """`--mode`, `--fusion` and `--alpha`, checked before an index or a model loads (which takes seconds)."""
    from embedkit.errors import InputError
    from embedkit.index.fusion import check_fusion
    from embedkit.index.search import SEARCH_MODES

    if mode is not None and mode not in SEARCH_MODES:
        raise InputError(f"unknown search mode {mode!r}: use {', '.join(SEARCH_MODES)}")
    check_fusion(fusion, alpha)
