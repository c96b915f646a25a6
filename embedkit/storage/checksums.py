"""Every file of a published folder checked against the size and SHA-256 recorded when it was written.

`checksums.json` lists each file (a relative path, so files in subfolders too) with its size, its
SHA-256 and, for a file of more than one block, the SHA-256 of each block (truncated to 64 bits:
enough to tell a damaged block, small enough to keep a 15 GB file's list at ~20 KB).

Two levels of checking:
- on open (`verify_checksums`), at a bounded cost: the smallest files are hashed in full, up to
  `OPEN_FULL_BYTES` in all (~80 ms at the 800 MB/s SHA-256 runs at here); a larger file must match
  its full hash as cached by (path, size, mtime, ctime, inode) - a rewrite, even one that restores
  the mtime, changes the ctime and is re-hashed - and `SAMPLED_BLOCKS` of its blocks (the first, the
  last and random ones, different on each open) are read and compared with their recorded hashes.
  Damage that changes no metadata (bit rot) in a large file is caught when a sampled block holds it;
- in full (`embedkit verify`, `verify_checksums(..., full=True)`): every byte of every file,
  ignoring the cache, naming the first damaged byte range.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.errors import InputError
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.user_cache import cache_dir
from embedkit.storage.version_names import is_version_folder

CHECKSUMS = "checksums.json"
# Written with checksums.json, listed in it: this folder's checksums were recorded, so a folder
# holding the stamp and no checksums.json lost them (it is damaged, not "from before checksums").
STAMP = ".embedkit-checksummed.json"
OPEN_FULL_BYTES = 64 << 20  # hashed in full on every open, smallest files first
SAMPLED_BLOCKS = 8  # of each larger file, besides its first and last block
MIN_BLOCK = 1 << 20
MAX_BLOCKS = 1024  # a larger file gets larger blocks (powers of two)
_BLOCK_DIGEST = 16  # hex characters kept of each block's SHA-256
_cache: dict[tuple[str, int, int, int, int], str] = {}
_digests: dict[tuple[object, ...], str] = {}
_retired: set[Path] = set()  # cache folders whose flat-layout entries this process has deleted


class ChecksumMismatch(InputError):
    """A listed file is missing, or its size or content is not the one recorded: the folder is damaged."""


@dataclass(frozen=True)
class Recorded:
    """What `checksums.json` says of one file."""

    size: int
    sha256: str
    block_size: int = 0
    blocks: tuple[str, ...] = ()


def block_size_for(size: int) -> int:
    block = MIN_BLOCK
    while block * MAX_BLOCKS < size:
        block *= 2
    return block


def _hash_file(path: Path, block: int) -> tuple[str, list[str]]:
    """The file's SHA-256 and each `block`-byte block's, in one pass."""
    whole = hashlib.sha256()
    blocks = []
    with path.open("rb") as fh:
        while chunk := fh.read(block):
            whole.update(chunk)
            blocks.append(hashlib.sha256(chunk).hexdigest()[:_BLOCK_DIGEST])
    return whole.hexdigest(), blocks


def _key(path: Path) -> tuple[str, int, int, int, int]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)


def _cache_entry(kind: str, name: str) -> Path:
    """One small file per entry, in 256 subfolders by its name's first two hex digits: a write
    sweeps its own folder for leftovers (`atomic_path`), which must stay small as the cache grows
    by every file ever checksummed (one flat folder of 114,000 entries cost 0.3 s a write)."""
    digest = hashlib.sha1(name.encode()).hexdigest()
    return cache_dir() / kind / digest[:2] / f"{digest}.json"


def _cache_file(key: tuple[str, int, int, int, int]) -> Path:
    return _cache_entry("checksums", key[0])


def _write_entry(file: Path, record: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        _retire_flat_entries(file.parent.parent)
        write_json_atomic(file, record)


def _retire_flat_entries(folder: Path) -> None:
    """Delete, once, the entries of the layout before the subfolders (`<sha1>.json` in `folder`
    itself): never read again, they would only take the disk. A marker file says it was done."""
    if folder in _retired:
        return
    _retired.add(folder)
    marker = folder / ".subfolders"
    if marker.exists() or not folder.is_dir():
        return
    with os.scandir(folder) as entries:
        flat = [e.path for e in entries if e.name.endswith(".json") and len(e.name) == 45 and e.is_file()]
    for path in flat:
        Path(path).unlink(missing_ok=True)
    marker.touch()


def _remember(key: tuple[str, int, int, int, int], sha: str) -> None:
    _cache[key] = sha
    _write_entry(_cache_file(key), {"key": list(key), "sha256": sha})


def cached_sha256(path: Path) -> str:
    """SHA-256 of `path`, cached by (path, size, mtime, ctime, inode): hashed once until rewritten."""
    key = _key(path)
    if key in _cache:
        return _cache[key]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(_cache_file(key).read_text(encoding="utf-8"))
        if record["key"] == list(key):
            _cache[key] = str(record["sha256"])
            return _cache[key]
    sha, _ = _hash_file(path, MIN_BLOCK)
    _remember(key, sha)
    return sha


def cached_digest(paths: Sequence[Path], what: str, compute: Callable[[], str]) -> str:
    """`compute()`, a digest of the files `paths` (`what` names the kind), cached in memory and in
    the user's cache folder by each file's (path, size, mtime, ctime, inode), as `cached_sha256`:
    computed once until a file is rewritten. A model's weights (hundreds of MB) are hashed so once,
    not by every cold `embedkit search` that checks them."""
    key = (what, *(part for path in paths for part in _key(path)))
    if key in _digests:
        return _digests[key]
    names = json.dumps([what, *(str(path.resolve()) for path in paths)])
    file = _cache_entry("digests", names)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = json.loads(file.read_text(encoding="utf-8"))
        if record["key"] == list(key):
            _digests[key] = str(record["digest"])
            return _digests[key]
    digest = compute()
    _digests[key] = digest
    _write_entry(file, {"key": list(key), "digest": digest})
    return digest


def _listed(folder: Path) -> Iterator[Path]:
    """Every file of `folder` and its subfolders but lock files (tantivy's `.tantivy-*.lock`, which a
    reader may create) and writers' temporary files; hidden data files (`.managed.json`) count."""
    for path in sorted(folder.rglob("*")):
        name = path.name
        transient = name.endswith(".lock") or (name.startswith(".") and name.endswith(".tmp"))
        if path.is_file() and not transient and path.relative_to(folder).as_posix() != CHECKSUMS:
            yield path


def write_checksums(folder: Path) -> dict[str, dict[str, object]]:
    """Record every file's size, SHA-256 and block hashes in `folder/checksums.json` (and the stamp
    that says they were recorded, itself listed)."""
    from embedkit import __version__

    write_json_atomic(folder / STAMP, {"checksums": CHECKSUMS, "embedkit_version": __version__})
    sums: dict[str, dict[str, object]] = {}
    for path in _listed(folder):
        key = _key(path)
        block = block_size_for(key[1])
        sha, blocks = _hash_file(path, block)
        _remember(key, sha)
        entry: dict[str, object] = {"bytes": key[1], "sha256": sha}
        if len(blocks) > 1:
            entry["blocks"] = {"bytes": block, "sha256": blocks}
        sums[path.relative_to(folder).as_posix()] = entry
    write_json_atomic(folder / CHECKSUMS, {"files": sums})
    return sums


def expects_checksums(folder: Path) -> bool:
    """Whether `folder` was written with checksums: it holds the stamp, or it is a version folder
    (`v-N` of a versioned folder: versions and checksums came in one release, so none lacks them)."""
    return (folder / STAMP).is_file() or is_version_folder(folder)


def read_checksums(folder: Path) -> dict[str, Recorded] | None:
    """The files `folder/checksums.json` lists; None where the folder was written before checksums.

    A folder that should have them (`expects_checksums`) and has none is a `ChecksumMismatch`.
    """
    path = folder / CHECKSUMS
    if not path.is_file():
        if expects_checksums(folder):
            raise ChecksumMismatch(
                f"{path} is missing: {folder} was written with checksums and lost them, so it is damaged; "
                "rebuild the index or restore it from a backup"
            )
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        recorded = {}
        for name, v in files.items():
            blocks = v.get("blocks") or {"bytes": 0, "sha256": []}
            recorded[str(name)] = Recorded(
                int(v["bytes"]), str(v["sha256"]), int(blocks["bytes"]), tuple(map(str, blocks["sha256"]))
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise InputError(f"{path} is damaged: rebuild the folder") from None
    for name, entry in recorded.items():
        if name.startswith("/") or ".." in Path(name).parts:
            raise InputError(f"{path} names {name!r}, outside the folder: it is damaged")
        if entry.blocks and len(entry.blocks) != -(-entry.size // max(entry.block_size, 1)):
            raise InputError(f"{path}: the block hashes of {name!r} do not fit its size: it is damaged")
    return recorded


def _corrupt(file: Path, detail: str = "") -> ChecksumMismatch:
    return ChecksumMismatch(
        f"corrupt file {file}{detail}: its content does not match the checksum recorded when it was written"
    )


def _first_bad_block(file: Path, entry: Recorded) -> str:
    """' (bytes A-B)' naming the first damaged block, where block hashes were recorded."""
    if not entry.blocks:
        return ""
    _, blocks = _hash_file(file, entry.block_size)
    for number, (found, expected) in enumerate(zip(blocks, entry.blocks, strict=False)):
        if found != expected:
            start = number * entry.block_size
            return f" (bytes {start}-{min(start + entry.block_size, entry.size) - 1})"
    return ""


def _check_sampled_blocks(file: Path, entry: Recorded, rng: random.Random) -> None:
    count = len(entry.blocks)
    picks = {0, count - 1, *rng.sample(range(count), min(SAMPLED_BLOCKS, count))}
    with file.open("rb") as fh:
        for number in sorted(picks):
            fh.seek(number * entry.block_size)
            found = hashlib.sha256(fh.read(entry.block_size)).hexdigest()[:_BLOCK_DIGEST]
            if found != entry.blocks[number]:
                start = number * entry.block_size
                end = min(start + entry.block_size, entry.size) - 1
                raise _corrupt(file, f" (bytes {start}-{end})")


def verify_checksums(
    folder: Path, names: tuple[str, ...] | None = None, *, full: bool = False, required: tuple[str, ...] = ()
) -> int:
    """Check the files `checksums.json` lists (or only `names`); return the bytes read in full.

    A missing file, a size or a hash that differs is a `ChecksumMismatch`, and so is a file of
    `names` or `required` (those the reader opens) that the list leaves out: dropping its entry
    would turn its check off. A folder written before checksums is not checked. `full`: hash every
    byte, ignoring the cache (see the module).
    """
    recorded = read_checksums(folder)
    if recorded is None:
        return 0  # written before checksums were recorded
    unlisted = sorted(n for n in {*(names or ()), *required} if n not in recorded and (folder / n).is_file())
    if unlisted:
        raise ChecksumMismatch(
            f"{folder / unlisted[0]} is not listed in {folder / CHECKSUMS}: the folder was changed after it "
            "was written"
        )
    entries = sorted(
        ((name, entry) for name, entry in recorded.items() if names is None or name in names),
        key=lambda item: (item[1].size, item[0]),
    )
    budget = OPEN_FULL_BYTES
    hashed = 0
    rng = random.Random()
    for name, entry in entries:
        file = folder / name
        if not file.is_file():
            raise ChecksumMismatch(f"{file} is missing: the folder is incomplete")
        actual = file.stat().st_size
        if actual != entry.size:
            raise ChecksumMismatch(f"file {file} is truncated or altered: {actual} bytes, not {entry.size}")
        if full or entry.size <= budget:
            budget -= 0 if full else entry.size
            sha, _ = _hash_file(file, MIN_BLOCK)
            hashed += entry.size
            if sha != entry.sha256:
                raise _corrupt(file, _first_bad_block(file, entry))
            if full:
                _remember(_key(file), sha)
            continue
        if cached_sha256(file) != entry.sha256:
            raise _corrupt(file, _first_bad_block(file, entry))
        if entry.blocks:
            _check_sampled_blocks(file, entry, rng)
    return hashed
