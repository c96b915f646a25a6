"""A write that fails while running - the disk full, the output folder made unwritable - as one line.

Every atomic writer (`embedkit.storage.atomic`, `embedkit.storage.versioned`) runs its work inside
`named_write_failures(target)`: such a failure becomes a `WriteFailure` (exit 1) that names the
output the user asked for (not a temporary file) and, for a full disk, the space left there; the
writer's own cleanup then removes its temporary files, and the previous output stays as it was.

SQLite and faiss report these failures in their own exception types; their messages are
recognised here, so a full disk while building an index reads the same as one while embedding.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from embedkit.errors import RunFailure

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NO_PERMISSION = (errno.EACCES, errno.EPERM, errno.EROFS)


class WriteFailure(RunFailure):
    """Writing `target` failed with `code` (an errno of `NO_SPACE` or `NO_PERMISSION`)."""

    def __init__(self, code: int, target: str | os.PathLike[str]) -> None:
        self.code, self.target = code, Path(target)
        super().__init__(code, str(target))

    def __str__(self) -> str:
        # Measured when shown, after the writer removed its temporary files: the space a rerun has.
        return _message(self.code, self.target)


def free_space(path: Path) -> str:
    """The free space of the file system holding `path` (its nearest existing folder), readable."""
    for folder in (path, *path.absolute().parents):
        with contextlib.suppress(OSError):
            free = float(shutil.disk_usage(folder).free)
            for unit in ("bytes", "KB", "MB", "GB", "TB"):
                if free < 1000 or unit == "TB":
                    return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"
                free /= 1000
    return "unknown space"


def _message(code: int, target: Path) -> str:
    reason = os.strerror(code).lower()
    if code in NO_SPACE:
        return (
            f"{reason} writing {target} ({free_space(target)} free there): free some space and run again; "
            "the previous output, if any, is unchanged"
        )
    return (
        f"cannot write {target}: {reason} (was its folder made unwritable during the run?); "
        "the previous output, if any, is unchanged"
    )


def write_errno(exc: BaseException, target: Path | None = None) -> int | None:
    """The errno of a failed write, from an `OSError` or from SQLite's or faiss's message; else None.

    With `target`, a permission error on a file outside its folder (an input) is not its write's.
    """
    if isinstance(exc, WriteFailure):
        return exc.code
    if isinstance(exc, OSError):
        named = exc.filename if isinstance(exc.filename, (str, bytes)) else None
        folder = target.absolute().parent if target is not None else None
        if (
            exc.errno in NO_PERMISSION
            and named
            and folder
            and not Path(os.fsdecode(named)).absolute().is_relative_to(folder)
        ):
            return None
        return exc.errno if exc.errno in NO_SPACE + NO_PERMISSION else None
    text = str(exc).lower()
    if isinstance(exc, sqlite3.Error):
        if "disk is full" in text:
            return errno.ENOSPC
        if "readonly database" in text:
            return errno.EACCES
    if isinstance(exc, RuntimeError):  # faiss: "... write error ... (No space left on device)"
        for code in NO_SPACE + NO_PERMISSION:
            if os.strerror(code).lower() in text:
                return code
    return None


@contextlib.contextmanager
def named_write_failures(target: str | os.PathLike[str]) -> Iterator[None]:
    """Turn a failed write inside the block into a `WriteFailure` naming `target`."""
    try:
        yield
    except Exception as exc:
        code = write_errno(exc, Path(target))
        if code is None:
            raise
        raise WriteFailure(code, target) from None


def preallocate(path: Path) -> None:
    """Reserve the blocks of `path` at its current size, so a full disk is an `OSError` now.

    A memory map over a sparse file (`numpy.lib.format.open_memmap`) that meets a full disk is
    killed by SIGBUS, with no message and its temporary files left behind.
    """
    with path.open("r+b") as fh:
        try:
            os.posix_fallocate(fh.fileno(), 0, path.stat().st_size)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                raise  # the file system cannot reserve space: the map is written as before


def npy_for_writing(path: Path, shape: tuple[int, int]):  # -> np.memmap
    """A float32 `.npy` memory map of `shape` at `path`, its space reserved (`preallocate`)."""
    import numpy as np

    matrix = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    preallocate(path)
    return matrix
