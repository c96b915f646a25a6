"""The one way embedkit opens a file the user hands it: a corpus, queries, qrels, STS pairs, ids.

Only a regular file (or a symlink to one) is read. A FIFO, a socket or a device would make a
read wait for a writer that may never come (a FIFO) or never end (`/dev/zero`), and a folder
where a file is expected fails deep inside a reader: each is one `InputError` (exit 2) naming
the path and what it is, before any byte is read.

The check is made twice: on the path (`check_input_file`, with the message), and on the opened
descriptor (`open_input`). The open is non-blocking, so a path swapped for a FIFO between the
two cannot hang: the descriptor's own type is checked before the first read.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from embedkit.errors import InputError

_KINDS = (
    (stat.S_ISFIFO, "a pipe or FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def kind_of(mode: int) -> str:
    """What a `st_mode` is, for a message: "a file", "a folder", "a pipe or FIFO", "a socket", ..."""
    if stat.S_ISREG(mode):
        return "a file"
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _not_a_file(path: Path, what: str, mode: int) -> InputError:
    link = f" (a symlink to {path.resolve()})" if path.is_symlink() else ""
    kind = kind_of(mode)
    if stat.S_ISDIR(mode):
        return InputError(f"{what} {path}{link} is a folder, not a file")
    return InputError(
        f"{what} {path}{link} is {kind}, not a file: embedkit reads only regular files "
        "(write the data to a file first)"
    )


def input_mode(path: str | os.PathLike[str], what: str = "file") -> int:
    """The `st_mode` of `path` (symlinks followed); a missing path or dangling symlink is an `InputError`."""
    path = Path(path).expanduser()
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(f"{what} {path} is a symlink to {os.readlink(path)}, which does not exist") \
                from None
        raise InputError(f"{what} not found: {path}") from None
    except OSError as exc:  # a loop of symlinks, a name too long, a folder on the way not searchable
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None


def check_input_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """`path` if it is a regular file (through any symlinks); else one `InputError` saying what it is."""
    path = Path(path).expanduser()
    mode = input_mode(path, what)
    if not stat.S_ISREG(mode):
        raise _not_a_file(path, what, mode)
    return path


def check_input_file_or_folder(path: str | os.PathLike[str], what: str = "file") -> Path:
    """`path` if it is a regular file or a folder (a BEIR folder, a folder of parts); else an `InputError`."""
    path = Path(path).expanduser()
    mode = input_mode(path, what)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise _not_a_file(path, what, mode)
    return path


@contextlib.contextmanager
def open_input(
    path: str | os.PathLike[str], what: str = "file", *, gunzip: bool | None = None
) -> Iterator[BinaryIO]:
    """The bytes of the regular file `path`, decompressed when it ends in `.gz` (or `gunzip` says so).

    A path that is not a regular file, or cannot be opened, is an `InputError`; a read error
    later (a truncated `.gz`, an I/O error) is the caller's to report with its line number.
    """
    path = check_input_file(path, what)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # replaced since it was checked
        os.close(fd)
        raise _not_a_file(path, what, mode)
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as raw:
        if gunzip if gunzip is not None else path.name.lower().endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield raw


def read_input_bytes(path: str | os.PathLike[str], what: str = "file", limit: int | None = None) -> bytes:
    """All the bytes of the regular file `path` (not decompressed); with `limit`, at most that many
    (a caller that passes its bound plus one tells a file over it without reading it all)."""
    with open_input(path, what, gunzip=False) as handle:
        try:
            return handle.read() if limit is None else handle.read(limit)
        except OSError as exc:
            raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None


def read_input_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of the regular file `path` (not decompressed); bad UTF-8 is an `InputError`."""
    data = read_input_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not valid UTF-8 (byte {exc.start + 1})") from None


__all__ = [
    "check_input_file",
    "check_input_file_or_folder",
    "input_mode",
    "kind_of",
    "open_input",
    "read_input_bytes",
    "read_input_text",
]
