"""Checks every command makes on its outputs before any work: writable, and never one of its inputs.

`check_io` is called first thing by each command with everything it reads and writes. An output
that resolves (symlinks followed, hard links compared) to an input, lies inside an input folder
over an existing file, or is a folder that holds an input, would destroy the user's data: it is an
`InputError` (exit 2), before anything is read or written. An output whose folder cannot be
written is one too, so that an hour of embedding does not end in a PermissionError.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from embedkit.errors import InputError

PathLike = str | os.PathLike[str] | None


def resolved(path: PathLike) -> Path | None:
    """`path` absolute, symlinks followed (None stays None)."""
    if path is None:
        return None
    return Path(os.path.abspath(Path(path).expanduser())).resolve(strict=False)


def _same(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _clash(output: Path, folder_output: bool, source: Path) -> bool:
    if _same(output, source):
        return True
    if folder_output and source.is_relative_to(output):
        return True  # replacing the folder would delete the input inside it
    # a file written inside an input folder over one of its files
    return source.is_dir() and output.is_relative_to(source) and output.exists()


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _writable(folder: Path) -> bool:
    mode = os.W_OK | os.X_OK
    if os.access in os.supports_effective_ids:
        return os.access(folder, mode, effective_ids=True)
    return os.access(folder, mode)


def check_writable(path: PathLike, *, folder: bool = False) -> None:
    """An `InputError` unless `path` can be created or replaced (its folder, and a folder output itself)."""
    target = resolved(path)
    if target is None:
        return
    existing = _nearest_existing(target.parent)
    if not existing.is_dir():
        raise InputError(f"cannot write {path}: {existing} is a file, not a folder")
    if not _writable(existing):
        raise InputError(f"cannot write {path}: no write permission in {existing}")
    if folder and target.is_dir() and not _writable(target):
        raise InputError(f"cannot write {path}: no write permission in {target}")


def check_io(
    inputs: Iterable[PathLike] = (),
    files: Iterable[PathLike] = (),
    folders: Iterable[PathLike] = (),
    indexes: Iterable[PathLike] = (),
) -> None:
    """Refuse outputs that would overwrite an input or cannot be written (that none lies inside an
    index folder is `embedkit.index.folder.check_not_in_index`'s).

    `files` and `folders` are outputs; `indexes` are index folders the command writes.
    """
    sources = [p for p in (resolved(i) for i in inputs) if p is not None and p.exists()]
    outputs = [(p, False) for p in files if p is not None] + [(p, True) for p in folders if p is not None]
    indexes = [p for p in indexes if p is not None]
    for given, folder in [*outputs, *((p, True) for p in indexes)]:
        output = resolved(given)
        assert output is not None
        for source in sources:
            if _clash(output, folder, source):
                raise InputError(
                    f"the output {given} would overwrite the input {source}: choose another path"
                )
        check_writable(given, folder=folder)
