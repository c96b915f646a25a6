"""Milvus Lite files: what a `.db` path must be, and Milvus Lite's own failures as one embedkit line.

A Milvus Lite database is a folder (`LOCK`, `collections/`, `databases/`) that a push creates.
`check_lite_path` is asked first by every command that opens one: a push may create it (its
folder must be writable), a reader may not (a missing `.db` is refused, not created empty), and
a path that is a file, a FIFO or a device is no database for either.

Milvus Lite runs in-process. When its server cannot start it logs the exception, with its
traceback, on stderr and hands pymilvus nothing, so pymilvus says only "Open local milvus
failed"; each failed request is logged the same way. `LiteLog` takes those records off stderr
and keeps the last exception, and `lite_failure` turns it into what really happened: the
database open in another process, a full disk (exit 1), an unwritable folder, a plain file.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from embedkit.errors import EmbedkitError, InputError, RunFailure
from embedkit.storage.write_failures import NO_PERMISSION, NO_SPACE, WriteFailure, write_errno


class LiteLog(logging.Handler):
    """Milvus Lite's log records, kept off stderr; `last` is the latest one's exception."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.last = record.exc_info[1]


LITE_LOG = LiteLog()


def quiet_milvus_lite() -> LiteLog:
    """Route Milvus Lite's loggers to `LITE_LOG` (once), instead of stderr.

    `grpc._server` is the in-process gRPC server Milvus Lite runs (embedkit runs no other): it
    logs a traceback for each call Milvus Lite does not implement.
    """
    for name in ("milvus_lite", "grpc._server"):
        logger = logging.getLogger(name)
        if LITE_LOG not in logger.handlers:
            logger.addHandler(LITE_LOG)
            logger.propagate = False
    return LITE_LOG


def check_lite_path(path: str | os.PathLike[str], *, create: bool) -> None:
    """An `InputError` unless `path` is a Milvus Lite database folder (or, with `create`, can be one)."""
    from embedkit.data.input_files import input_mode, kind_of
    from embedkit.storage.outputs import check_writable

    path = Path(path).expanduser()
    if not os.path.lexists(path):
        if not create:
            raise InputError(f"no Milvus Lite database at {path}: push an index there first")
        check_writable(path, folder=True)
        return
    mode = input_mode(path, "Milvus Lite database")  # a dangling symlink says so
    if not stat.S_ISDIR(mode):
        raise InputError(
            f"{path} is {kind_of(mode)}, not a Milvus Lite database (a folder that `embedkit push` creates): "
            "choose another .db path"
        )
    if create:
        check_writable(path, folder=True)


def lite_failure(path: str, what: str, cause: BaseException) -> EmbedkitError:
    """The embedkit error for Milvus Lite's exception `cause` while doing `what` on `path`."""
    name = type(cause).__name__
    if name == "DataDirLockedError":
        return InputError(
            f"{path} is open in another process (Milvus Lite opens a database in one process at a "
            "time): wait for it to finish, then run again"
        )
    code = write_errno(cause)
    if code is None and isinstance(cause, (FileExistsError, NotADirectoryError)):
        return InputError(f"{path} is a file, not a Milvus Lite database: choose another .db path")
    if code in NO_SPACE:
        return WriteFailure(code, path)
    if code in NO_PERMISSION:
        return InputError(f"cannot write {path}: {os.strerror(code).lower()}")
    message = " ".join(str(cause).split()) or name
    return RunFailure(f"{path}: {what} failed in Milvus Lite: {message}")


def lite_failure_in(path: str, message: str) -> EmbedkitError | None:
    """A full disk or a refused write named in the text of a failed Milvus Lite request, else None."""
    text = message.lower()
    for code in (*NO_SPACE, errno.EACCES, errno.EROFS):
        if os.strerror(code).lower() in text:
            if code in NO_SPACE:
                return WriteFailure(code, path)
            return InputError(f"cannot write {path}: {os.strerror(code).lower()}")
    return None
