"""Folders replaced in one step: complete versions in subfolders and one pointer file that names the live one.

ROOT/
    .embedkit-versions the marker that this folder is embedkit's: `clean` deletes nothing elsewhere
    CURRENT            one line, the live version's name; switched by an atomic rename
    v-000003/          the live version: the folder's files and checksums.json
    v-000002/          the previous one, kept so that a reader that read CURRENT just before a
                       switch can still open it; older versions are deleted
A writer builds a new version in `ROOT/.staging-PID-XXXX/`, renames it to `v-N` (invisible to
readers until it is named by CURRENT), then rewrites CURRENT (temp file + rename): that rename is
the one step that makes the new version live, so a reader sees the old or the new version and a
kill at any step leaves the old one live. A folder's first build has no old version to leave live:
it writes the journal `.embedkit-first-build` before its staging folder and removes it once CURRENT
names the version, so a first build killed at any step (even after its version was renamed, before
CURRENT) is told apart from a damaged pointer: every command sees a folder that holds no index yet
(`unfinished_first_build`), the same build run again starts over, and `clean` removes what it
left. Writers hold `embedkit.storage.locking.write_lock(ROOT)`, so any
staging folder found by the next writer (or `embedkit clean ROOT`) is a killed run's and is removed.

A folder without CURRENT is the older flat layout: its files are read where they are, and the
first new version replaces them.

`checksums.json` records every file's size and SHA-256 when the version is published;
`embedkit.storage.checksums.verify_checksums` checks them on load, at a bounded cost, and in full for
`embedkit verify`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from embedkit.errors import InputError
from embedkit.storage.atomic import apply_umask, fault_point, write_text_atomic
from embedkit.storage.checksums import CHECKSUMS, verify_checksums, write_checksums
from embedkit.storage.version_names import FIRST_BUILD, MARKER, POINTER, STAGING, VERSION, is_version_folder
from embedkit.storage.write_failures import named_write_failures

__all__ = [
    "CHECKSUMS",
    "MARKER",
    "POINTER",
    "clean",
    "current_dir",
    "is_version_folder",
    "is_versioned",
    "new_version",
    "verify_checksums",
]


def current_dir(root: str | Path) -> Path:
    """The folder a reader opens: the version CURRENT names, or ROOT itself (flat layout)."""
    from embedkit.data.input_files import read_input_text  # a FIFO pointer must not hang a reader

    root = Path(root)
    if not os.path.lexists(root / POINTER):
        if unfinished_first_build(root):
            raise InputError(
                f"{root} holds no index: its first build has not finished (it was stopped, or is still "
                f"running); run that build again, or `embedkit clean {root}` to remove what it left"
            )
        return root
    name = read_input_text(root / POINTER, "version pointer").strip()
    if not VERSION.match(name):
        raise InputError(f"{root / POINTER} names {name[:40]!r}, not a version folder: the folder is damaged")
    return root / name


def is_versioned(root: str | Path) -> bool:
    return (Path(root) / POINTER).is_file()


def owns(root: str | Path) -> bool:
    """Whether `root` is a versioned folder of embedkit's: it carries the marker (written by every
    version since the marker came in). Other folders are never cleaned, whatever else they hold.
    """
    return (Path(root) / MARKER).is_file()


def unfinished_first_build(root: str | Path) -> bool:
    """Whether `root` holds a first build that was stopped before CURRENT named its version (its
    journal is there, CURRENT is not): nothing in it is published, so it holds no index."""
    root = Path(root)
    return (root / FIRST_BUILD).is_file() and not os.path.lexists(root / POINTER)


def damaged_pointer(root: str | Path) -> str | None:
    """What is wrong with the pointer of embedkit's versioned folder `root`, or None when it names a
    version that is there. A damaged pointer leaves no way to tell the live version from the old
    ones, so nothing may be deleted: `clean` refuses, `verify` names the repair (`pointer_repair`).
    """
    root = Path(root)
    versions = _versions(root)
    if not (root / POINTER).exists():
        if not versions or unfinished_first_build(root):
            return None  # a first write killed before its version: nothing but the marker
        names = ", ".join(v.name for v in versions)
        return f"{root / POINTER} is missing (the folder holds {names})"
    try:
        live = current_dir(root)
    except InputError as exc:
        return str(exc)
    if not live.is_dir():
        return f"{root / POINTER} names {live.name}, which is missing"
    return None


def pointer_repair(root: str | Path) -> str:
    """The repair of a damaged pointer: name the newest version whose checksums verify."""
    root = Path(root)
    for version in reversed(_versions(root)):
        try:
            verify_checksums(version, full=True)
        except InputError:
            continue
        return (
            f"the newest intact version is {version.name}: restore the pointer with "
            f"`echo {version.name} > {root / POINTER}`"
        )
    return "no version is intact: rebuild the index"


def holds_no_version(root: str | Path) -> bool:
    """Whether `root` holds nothing but what a killed first write leaves: the marker, staging folders,
    or a first build that did not finish (`unfinished_first_build`)."""
    if unfinished_first_build(root):
        return True
    return all(p.name == MARKER or STAGING.match(p.name) for p in Path(root).iterdir())


def _discard_first_build(root: Path) -> list[Path]:
    """Remove what an unfinished first build left (its staging folders, its unpublished versions and
    its journal, last); the caller holds the write lock and has checked `unfinished_first_build`."""
    removed: list[Path] = []
    for entry in sorted(root.iterdir(), key=lambda p: p.name == FIRST_BUILD):
        ours = bool(STAGING.match(entry.name)) or (bool(VERSION.match(entry.name)) and _written_here(entry))
        if (ours and entry.is_dir()) or entry.name == FIRST_BUILD:
            removed += _removed(entry)
    return removed


def _removed(entry: Path) -> list[Path]:
    """Remove `entry` (a folder with what it holds), never through a symbolic link; [entry] if gone."""
    if entry.is_symlink():
        return []
    if entry.is_dir():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)
    return [] if entry.exists() else [entry]


def _versions(root: Path) -> list[Path]:
    found = [p for p in root.iterdir() if VERSION.match(p.name) and p.is_dir()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name[2:]))


@contextlib.contextmanager
def new_version(root: str | Path, *, keep_files: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty staging folder inside `root`; on success it becomes the live version.

    The caller holds `write_lock(root)`. On an exception the staging folder is removed and the live
    version is untouched. `keep_files`: names in ROOT that are not the flat layout's (never removed).
    """
    root = Path(root)
    created = not root.exists()
    with named_write_failures(root):
        root.mkdir(parents=True, exist_ok=True)
        if not (root / MARKER).is_file():
            write_text_atomic(root / MARKER, "embedkit versioned folder (see embedkit/versioned.py)\n")
        first = not os.path.lexists(root / POINTER) and holds_no_version(root)
        if first:  # a killed first build's leftovers go; the journal says this one is under way
            _discard_first_build(root)
            write_text_atomic(root / FIRST_BUILD, "a first build under way (see embedkit/versioned.py)\n")
        stage = Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=root))
    try:
        with named_write_failures(root):  # the disk full, the folder made unwritable: one line
            yield stage
            write_checksums(stage)
            apply_umask(stage)
            fault_point("version-staged")
            versions = _versions(root)
            number = int(versions[-1].name[2:]) + 1 if versions else 1
            final = root / f"v-{number:06d}"
            os.rename(stage, final)
            fault_point("version-renamed")
            flat = [p for p in root.iterdir() if p.is_file() and not is_versioned(root)]
            write_text_atomic(root / POINTER, final.name + "\n")  # the one step that switches readers
            fault_point("version-switched")
            (root / FIRST_BUILD).unlink(missing_ok=True)
            for path in flat:  # the older flat layout's files, now replaced by the version
                if path.name not in keep_files and not path.name.startswith("."):
                    path.unlink(missing_ok=True)
            clean(root)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
        if first and unfinished_first_build(root):  # a failed first write publishes nothing
            _discard_first_build(root)
        if created and not is_versioned(root) and holds_no_version(root):
            shutil.rmtree(root, ignore_errors=True)  # a failed first write leaves no folder behind


def _written_here(version: Path) -> bool:
    """Whether `version` is a folder embedkit published: every version holds checksums.json."""
    return version.is_dir() and not version.is_symlink() and (version / CHECKSUMS).is_file()


def clean(root: str | Path) -> list[Path]:
    """Remove staging folders, temporary files and versions older than the previous one.

    The caller holds `write_lock(root)` (no writer is at work), so every staging folder is a
    killed run's. A folder that is not embedkit's (`owns`) is left alone; a damaged pointer is an
    `InputError` and nothing is removed. A symbolic link is never embedkit's (it writes none) and
    stays. Returns what was really removed.
    """
    root = Path(root)
    if not root.is_dir() or not owns(root):
        return []
    if unfinished_first_build(root):
        return _discard_first_build(root)
    problem = damaged_pointer(root)
    if problem is not None:
        raise InputError(f"{problem}: nothing removed; `embedkit verify {root}` names the repair")
    removed: list[Path] = []
    live = current_dir(root)
    keep: set[str] = set()
    if live != root:
        keep.add(live.name)
        older = [v for v in _versions(root) if int(v.name[2:]) < int(live.name[2:])]
        if older:
            keep.add(older[-1].name)  # the previous version: a reader may be opening it right now
    for entry in root.iterdir():
        temporary = entry.name.startswith(f".{POINTER}.") and entry.name.endswith(".tmp")
        temporary = temporary or entry.name == FIRST_BUILD  # CURRENT is there: a finished build's journal
        stale = (bool(STAGING.match(entry.name)) and entry.is_dir()) or temporary
        if VERSION.match(entry.name) and entry.name not in keep:
            stale = _written_here(entry)  # a folder embedkit published, never a user's look-alike
        if stale:
            removed += _removed(entry)
    return removed
