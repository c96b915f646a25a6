"""What every command shares: turning library errors into one line and an exit code, checking its
inputs and outputs, results on a standard output that may fail, and the truncation note of the
commands that embed."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import typer

from embedkit.errors import EmbedkitError, RunFailure

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `message` as one line on stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def check_io(
    inputs: Any = (), files: Any = (), folders: Any = (), wait: bool = False, indexes: Any = ()
) -> None:
    """Every command's first step: outputs writable, none of them an input or inside an index
    (`indexes`: the index folders the command writes); `--wait` for busy ones."""
    from embedkit.index.layout import check_not_in_index
    from embedkit.storage.locking import set_waiting
    from embedkit.storage.outputs import check_io as check

    for index in indexes:
        check_not_in_index(index, may_be_index=True)
    for output in (*files, *folders):
        check_not_in_index(output)
    check(inputs, files, folders, indexes)
    set_waiting(wait)


def handle_errors(func: F) -> F:
    """Run a command, mapping `EmbedkitError` to its exit code (2 input, 1 failure) and one line.

    Ctrl-C exits 130 without a traceback; anything else is a bug and keeps its traceback.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except StdoutFailure:
            raise  # reported once, by the app, which then silences the stream
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


class StdoutFailure(RunFailure):
    """Standard output could not be written (`> /dev/full`, a full disk, a closed pipe): exit 1."""

    def __init__(self, exc: OSError) -> None:
        self.errno = exc.errno
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        super().__init__(f"cannot write the results to standard output: {reason}")


class GuardedStdout:
    """`sys.stdout` whose failed writes raise a `StdoutFailure` (one line, exit 1), not an OSError.

    The app (`OneLineErrors.main`) installs it, reports the failure once and then `silence`s the
    stream, so that the interpreter's own flush at exit cannot fail again with a traceback.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutFailure(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise StdoutFailure(exc) from None

    def silence(self) -> None:
        """Point the stream's descriptor at /dev/null: what is still buffered goes nowhere."""
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError):  # a test's captured stream: nothing to silence
            return
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)

    # The rest of a text stream (`encoding`, `isatty`, `fileno`, `buffer`, ...) is the wrapped one's:
    # it stands in for `sys.stdout`, and click (8.x) and rich (13 to 15) each probe their own set of
    # its attributes, so no short list of properties would do; no embedkit object is behind it.
    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def print_truncated(
    console: Any,
    truncated: int,
    what: str = "document",
    hint: str = "",
    names: Sequence[str] = (),
    documents: int = 0,
) -> None:
    """The note, on a rich `console`, that `truncated` documents (or passages: `what`) were cut at
    the model's maximum length, naming the first `names` of the `documents` they belong to."""
    if not truncated:
        return
    plural = truncated != 1
    counted = f"{truncated:,} {what}{'s' if plural else ''} {'were' if plural else 'was'}"
    line = f"{counted} longer than the model's maximum length and truncated"
    if names:
        listed = ", ".join(names)
        more = documents - len(names)
        if more > 0:
            listed += f" and {more:,} more"
            listed += "" if what == "document" else f" document{'s' if more != 1 else ''}"
        line += f" ({listed})" if what == "document" else f" (in {listed})"
    console.print(line + hint, markup=False, highlight=False, soft_wrap=True)


def check_search_choices(mode: str | None, fusion: str | None, alpha: float | None) -> None:
    """`--mode`, `--fusion` and `--alpha`, checked before an index or a model loads (which takes
    seconds), by the one check every entry point uses (`embedkit.search.request.check_choices`)."""
    from embedkit.search.request import check_choices

    check_choices(mode, fusion, alpha)
