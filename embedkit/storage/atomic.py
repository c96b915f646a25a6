"""Atomic writes: a reader, or a crash, never sees a half-written file or folder.

Files are written to a temporary sibling and moved into place with `os.replace`, which is
atomic on POSIX when both paths are on the same file system (they are: same parent folder).
A folder replaces an existing one with `renameat2(RENAME_EXCHANGE)` (Linux 3.15+): the new and
the old folder swap names in one step, so no instant exists with no folder or a mix of both.
Where the exchange is not supported the old folder is first renamed aside; a kill between the
two renames is repaired by the next write to the same path (`sweep_leftovers`).

Temporary names carry the writer's pid (`.NAME.PID.XXXX.tmp`, `.NAME.old-PID`), so the next run
on the same target, or `embedkit clean`, can tell the leftovers of a killed run from the work of a
live one and remove them. Everything published gets the permissions of the umask, as the output
of any other tool would (`mkstemp` and some writers create 0600 files).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from embedkit.storage.write_failures import named_write_failures

# A test sets this to a function that raises or kills the process at a named step ("dir-staged",
# "dir-aside", "dir-swapped", ...), to prove that an interruption there leaves a consistent state.
fault_hook: Callable[[str], None] | None = None
FAULT_ENV = "EMBEDKIT_FAULT_AT"  # the same from the environment: SIGKILL at that step (subprocess tests)

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def fault_point(name: str) -> None:
    """Where a test may interrupt a multi-step replacement (no effect otherwise)."""
    if fault_hook is not None:
        fault_hook(name)
    if os.environ.get(FAULT_ENV) == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def apply_umask(path: Path) -> None:
    """Give `path` (and, for a folder, everything in it) the modes the umask gives new files."""
    mask = _umask()
    if path.is_symlink():
        return
    if path.is_dir():
        os.chmod(path, 0o777 & ~mask)
        for root, dirs, files in os.walk(path):
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
            for name in files:
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    executable = os.stat(full).st_mode & 0o111
                    os.chmod(full, (0o777 if executable else 0o666) & ~mask)
    else:
        executable = path.stat().st_mode & 0o111
        os.chmod(path, (0o777 if executable else 0o666) & ~mask)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another account's live process
    return True


def sweep_leftovers(target: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed writers of `target` left beside it; restore a folder renamed aside.

    Only names with a dead writer's pid are touched, so a concurrent live writer is never disturbed.
    """
    target = Path(target)
    parent = target.parent
    if not parent.is_dir():
        return []
    name = re.escape(target.name)
    temp = re.compile(rf"^\.{name}\.(\d+)\.[^/]*\.tmp$")
    aside = re.compile(rf"^\.{name}\.old-(\d+)$")
    removed: list[Path] = []
    own = f".{target.name}."  # the one prefix both patterns share: other names are skipped unparsed
    with os.scandir(parent) as names:
        mine = [parent / e.name for e in names if e.name.startswith(own)]
    for entry in mine:
        match = temp.match(entry.name) or aside.match(entry.name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        if aside.match(entry.name) and not target.exists() and not target.is_symlink():
            os.replace(entry, target)  # killed between the two renames: the old folder comes back
            continue
        _remove(entry)
        if not os.path.lexists(entry):  # report only what is really gone
            removed.append(entry)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success move it onto `path`, else delete it."""
    target = Path(path)
    with named_write_failures(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(target)
        prefix = f".{target.name}.{os.getpid()}."
        fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            yield tmp
            if tmp.exists():
                apply_umask(tmp)  # mkstemp created 0600; writers may have too
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):  # a folder made unwritable: the error says so
                tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def json_safe(data: Any) -> Any:
    """`data` with every NaN or infinity replaced by None: JSON has no such numbers."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    return data


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write strict JSON (NaN and infinities become null, which every JSON reader accepts)."""
    text = json.dumps(json_safe(data), indent=2, sort_keys=False, allow_nan=False, default=_json_default)
    write_text_atomic(path, text + "\n")


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (`renameat2(RENAME_EXCHANGE)`); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[Path]:
    """Yield an empty temporary folder beside `path`; on success it becomes `path`.

    An existing `path` is replaced only after the new folder is complete, in one atomic exchange
    where the kernel and file system allow it (else renamed aside, then replaced; a kill between
    those steps is undone by the next write). On an exception the temporary folder is removed and
    `path` is untouched.
    """
    target = Path(path)
    with named_write_failures(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(target)
        prefix = f".{target.name}.{os.getpid()}."
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
        try:
            yield tmp
            apply_umask(tmp)
            fault_point("dir-staged")
            if target.exists():
                if not replace:
                    raise FileExistsError(f"{target} already exists")
                if not exchange(tmp, target):
                    old = target.with_name(f".{target.name}.old-{os.getpid()}")
                    os.replace(target, old)
                    fault_point("dir-aside")
                    os.replace(tmp, target)
                    tmp = old
                fault_point("dir-swapped")
                shutil.rmtree(tmp, ignore_errors=True)  # now the old folder
            else:
                os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def scratch_dir(prefix: str) -> contextlib.AbstractContextManager[str]:
    """A temporary folder in the system's temp dir, named with this pid; those of dead runs go first."""
    base = Path(tempfile.gettempdir())
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)-")
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            match = pattern.match(entry.name)
            if match and not pid_alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-")


# --- several files replaced together -------------------------------------------------------------


def _journal(first: Path) -> Path:
    return first.with_name(f".{first.name}.commit")


def recover_files(first: str | os.PathLike[str]) -> bool:
    """Finish a replacement that a killed `atomic_files` had committed to; True if there was one."""
    journal = _journal(Path(first))
    try:
        pairs = json.loads(journal.read_text(encoding="utf-8"))["pairs"]
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        journal.unlink(missing_ok=True)  # cut short before it was complete: nothing was moved yet
        return False
    for tmp, target in pairs:
        if os.path.exists(tmp):
            os.replace(tmp, target)
    journal.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def atomic_files(*paths: str | os.PathLike[str]) -> Iterator[list[Path]]:
    """Yield temporary paths beside `paths`; on success all replace their targets, or (killed) none.

    A journal naming every (temporary, target) pair is written atomically before the first move:
    once it exists the replacement is decided, and a kill during the moves is rolled forward by
    the next write to the same files or by `embedkit clean`; before it, nothing has changed.
    """
    targets = [Path(p) for p in paths]
    temps: list[Path] = []
    with named_write_failures(targets[0]):
        recover_files(targets[0])
        try:
            for target in targets:
                target.parent.mkdir(parents=True, exist_ok=True)
                sweep_leftovers(target)
                prefix = f".{target.name}.{os.getpid()}."
                fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
                os.close(fd)
                temps.append(Path(name))
            yield temps
            for tmp in temps:
                apply_umask(tmp)
            pairs = [[str(tmp), str(target)] for tmp, target in zip(temps, targets, strict=True)]
            write_json_atomic(_journal(targets[0]), {"pairs": pairs})
            fault_point("files-journaled")
            for index, (tmp, target) in enumerate(zip(temps, targets, strict=True)):
                os.replace(tmp, target)
                fault_point(f"files-moved-{index + 1}")
            _journal(targets[0]).unlink(missing_ok=True)
        finally:
            if not _journal(targets[0]).exists():
                for tmp in temps:
                    with contextlib.suppress(OSError):  # a folder made unwritable: the error says so
                        tmp.unlink(missing_ok=True)
