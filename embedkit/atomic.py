"""Atomic writes: a reader, or a crash, never sees a half-written file or folder.

Files are written to a temporary sibling and moved into place with `os.replace`, which is
atomic on POSIX when both paths are on the same file system (they are: same parent folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success move it onto `path`, else delete it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    # mkstemp creates 0600; give the result the permissions a plain open() would have
    os.chmod(tmp_name, 0o666 & ~_umask())
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[Path]:
    """Yield an empty temporary folder beside `path`; on success it becomes `path`.

    An existing `path` is replaced only after the new folder is complete (it is first renamed
    aside, then deleted), so an interruption at any point leaves either the old or the new
    folder, never a mix. On an exception the temporary folder is removed and `path` is untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        yield tmp
        if target.exists():
            if not replace:
                raise FileExistsError(f"{target} already exists")
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
