"""One writer at a time per output: a lock file beside the target, holding the writer's pid.

Two `embedkit index --append` runs onto one index would each copy the same old index, and the
second to finish would silently drop the first one's documents. Every command that writes a
folder (index, embedding, training run, experiment) therefore takes `write_lock(target)` first: a
second writer fails at once with an `InputError` (exit 2) naming the holder's pid, or, inside
`wait_for_locks()`, waits for it.

The lock is `fcntl.flock` on `.NAME.lock` beside the target: the kernel releases it when its holder
dies, however it dies, so a lock left by a killed process is stale by construction and is simply
taken over (the pid in the file is only for the message). Readers take no lock: writers publish
atomically (`embedkit.storage.atomic`, `embedkit.storage.versioned`).

A lock is keyed on the target's resolved path (`lock_target`: symlinks followed, `..` and a
relative path made absolute), so every spelling of one folder - through a symlink to it or to a
folder above it, `a/../idx`, `./idx` - takes the same lock file. A lock file that cannot be
created or written because the disk is full is a `WriteFailure` (exit 1) before any work.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from embedkit.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("embedkit_wait_for_locks", default=False)
# What a refused writer is told to do to wait: a command has `--wait` (`set_waiting`, which every
# command calls first); the Python API has `wait_for_locks()`, and no `--wait` to pass.
class TargetBusy(InputError):
    """Another live process holds the write lock of the target."""


_API_ADVICE = "or write inside `with embedkit.storage.locking.wait_for_locks():` to wait"
_ADVICE: contextvars.ContextVar[str] = contextvars.ContextVar("embedkit_lock_advice", default=_API_ADVICE)
_HELD: set[Path] = set()  # targets this process holds, so a nested writer (experiment -> train) passes


def lock_target(target: str | os.PathLike[str]) -> Path:
    """The path a lock is keyed on: `target` resolved, whichever way it is spelled."""
    return Path(os.path.realpath(Path(target).expanduser()))


def lock_path(target: str | os.PathLike[str]) -> Path:
    target = lock_target(target)
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def wait_for_locks(enabled: bool = True) -> Iterator[None]:
    """Inside this block a busy target is waited for instead of being an error (`--wait`)."""
    token = _WAIT.set(enabled)
    try:
        yield
    finally:
        _WAIT.reset(token)


def set_waiting(enabled: bool) -> None:
    """`wait_for_locks(enabled)` for the rest of this context (a command's whole run, whose
    refusal then names the command's `--wait`)."""
    _WAIT.set(enabled)
    _ADVICE.set("or pass --wait")


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return "another process"
    return f"process {text}" if text.isdigit() else "another process"


@contextlib.contextmanager
def write_lock(target: str | os.PathLike[str], *, wait: bool | None = None) -> Iterator[None]:
    """Hold the write lock of `target` for the block; `InputError` if another live process holds it."""
    target = lock_target(target)
    if target in _HELD:
        yield
        return
    wait = _WAIT.get() if wait is None else wait
    path = lock_path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _full_disk(exc, target)
        reason = f"{path.parent} is not writable ({exc.strerror})"
        raise InputError(f"cannot write to {target}: {reason}") from None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            _full_disk(exc, target)
            raise InputError(f"cannot write {target}: {exc.strerror} ({path})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise TargetBusy(
                f"{target} is being written by {_holder(path)}: wait for it to finish, {_ADVICE.get()}"
            ) from None
        # The holder before us may have deleted the file after we opened it: lock the live file only.
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk: the write that follows would fail too, after the work
            _full_disk(exc, target)
            raise
        _HELD.add(target)
        yield
    finally:
        _HELD.discard(target)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _full_disk(exc: OSError, target: Path) -> None:
    """Raise the `WriteFailure` of a full disk (exit 1, naming `target`); return for anything else."""
    from embedkit.storage.write_failures import NO_SPACE, WriteFailure

    if exc.errno in NO_SPACE:
        raise WriteFailure(exc.errno, target) from None


def locked(argument: str) -> Callable[[F], F]:
    """Decorate a writer so that it holds `write_lock` on its parameter `argument` while it runs."""

    def decorate(func: F) -> F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            target = signature.bind(*args, **kwargs).arguments[argument]
            with write_lock(target):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
