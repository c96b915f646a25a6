"""Folders replaced in one step: complete versions in subfolders and one pointer file that names the live one.

ROOT/
    CURRENT            one line, the live version's name; switched by an atomic rename
    v-000003/          the live version: the folder's files and checksums.json
    v-000002/          the previous one, kept so that a reader that read CURRENT just before a
                       switch can still open it; older versions are deleted
A writer builds a new version in `ROOT/.staging-PID-XXXX/`, renames it to `v-N` (invisible to
readers until it is named by CURRENT), then rewrites CURRENT (temp file + rename): that rename is
the one step that makes the new version live, so a reader sees the old or the new version and a
kill at any step leaves the old one live. Writers hold `embedkit.storage.locking.write_lock(ROOT)`, so any
staging folder found by the next writer (or `embedkit clean ROOT`) is a killed run's and is removed.

A folder without CURRENT is the older flat layout: its files are read where they are, and the
first new version replaces them.

`checksums.json` records every file's size and SHA-256 when the version is published;
`verify_checksums` checks them on load. Hashing a 15 GB index (10M x 384 float32) takes seconds,
so a file's hash is cached by (path, size, mtime, inode) in this process and in the user's cache
folder: a load re-hashes only a file that was rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from embedkit.errors import InputError
from embedkit.storage.atomic import apply_umask, fault_point, write_json_atomic, write_text_atomic

POINTER = "CURRENT"
CHECKSUMS = "checksums.json"
_VERSION = re.compile(r"^v-(\d{6,})$")
_STAGING = re.compile(r"^\.staging-")
_CHUNK = 8 << 20
_cache: dict[tuple[str, int, int, int], str] = {}


def current_dir(root: str | Path) -> Path:
    """The folder a reader opens: the version CURRENT names, or ROOT itself (flat layout)."""
    root = Path(root)
    try:
        name = (root / POINTER).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return root
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {root / POINTER}: {exc}") from None
    if not _VERSION.match(name):
        raise InputError(f"{root / POINTER} names {name[:40]!r}, not a version folder: the folder is damaged")
    return root / name


def is_versioned(root: str | Path) -> bool:
    return (Path(root) / POINTER).is_file()


def _versions(root: Path) -> list[Path]:
    found = [p for p in root.iterdir() if _VERSION.match(p.name) and p.is_dir()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name[2:]))


@contextlib.contextmanager
def new_version(root: str | Path, *, keep_files: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty staging folder inside `root`; on success it becomes the live version.

    The caller holds `write_lock(root)`. On an exception the staging folder is removed and the live
    version is untouched. `keep_files`: names in ROOT that are not the flat layout's (never removed).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=root))
    try:
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
        for path in flat:  # the older flat layout's files, now replaced by the version
            if path.name not in keep_files and not path.name.startswith("."):
                path.unlink(missing_ok=True)
        clean(root)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def clean(root: str | Path) -> list[Path]:
    """Remove staging folders, temporary files and versions older than the previous one.

    The caller holds `write_lock(root)` (no writer is at work), so every staging folder is a
    killed run's. Returns what was removed.
    """
    root = Path(root)
    if not root.is_dir():
        return []
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
        stale = bool(_STAGING.match(entry.name)) or temporary
        if _VERSION.match(entry.name) and entry.name not in keep:
            stale = True
        if stale:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


# --- checksums -----------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """SHA-256 of `path`, cached by (path, size, mtime, inode): a file is hashed once until rewritten."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key in _cache:
        return _cache[key]
    disk = _cache_file(key)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(disk.read_text(encoding="utf-8"))
        if record["key"] == list(key):
            _cache[key] = str(record["sha256"])
            return _cache[key]
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    _cache[key] = digest.hexdigest()
    with contextlib.suppress(OSError):
        write_json_atomic(disk, {"key": list(key), "sha256": _cache[key]})
    return _cache[key]


def _cache_file(key: tuple[str, int, int, int]) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embedkit" / "checksums"
    return base / (hashlib.sha1(key[0].encode()).hexdigest() + ".json")


def write_checksums(folder: Path) -> dict[str, dict[str, object]]:
    """Record every file's size and SHA-256 in `folder/checksums.json`, subfolders' files included.

    Keys are paths relative to `folder` ("index.faiss", "lexical/meta.json"); names that start with
    a dot (an engine's lock and bookkeeping files) are not recorded.
    """
    files = (p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != CHECKSUMS)
    sums = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
        for p in files
        if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }
    write_json_atomic(folder / CHECKSUMS, {"files": sums})
    return sums


def verify_checksums(folder: Path, names: tuple[str, ...] | None = None) -> None:
    """Check the files `checksums.json` lists (or only `names`); a folder without it is not checked.

    A missing file, a size or a hash that differs is an `InputError`.
    """
    path = folder / CHECKSUMS
    if not path.is_file():
        return  # written before checksums were recorded
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        entries = {str(k): (int(v["bytes"]), str(v["sha256"])) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise InputError(f"{path} is damaged: rebuild the folder") from None
    for name, (size, sha) in entries.items():
        if names is not None and name not in names:
            continue
        file = folder / name
        if not file.is_file():
            raise InputError(f"{file} is missing: the folder is incomplete")
        actual = file.stat().st_size
        if actual != size:
            raise InputError(f"file {file} is truncated or altered: {actual} bytes, not {size}")
        if file_sha256(file) != sha:
            raise InputError(
                f"corrupt file {file}: its content does not match the checksum recorded when it was written"
            )
