"""What `embedkit clean TARGET` removes: every kind of leftover a killed run can leave on an output.

The same mechanisms run on their own at the start or end of the next successful write to the
same target (`embedkit.storage.atomic.sweep_leftovers`, `embedkit.storage.versioned.clean`, `recover_files`);
this module only gathers them for one target. The caller holds the target's write lock.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from embedkit.errors import InputError
from embedkit.storage.atomic import pid_alive, recover_files, sweep_leftovers
from embedkit.storage.versioned import clean as clean_versions

SCRATCH_PREFIXES = ("embedkit-export-", "embedkit-onnx-scratch-")
# a temporary file or commit journal of a killed `embed --shard` write (`embedkit.jobs.parts`)
PART_LEFTOVER = re.compile(r"^\.(part-\d+-of-\d+)\.(?:npy|ids\.txt|json)\.")
PART_SUFFIXES = (".npy", ".ids.txt", ".json")


def check_clean_target(target: str | Path) -> None:
    """A target that is not there, with nothing a killed write of it left beside it, is an
    `InputError`: "nothing to clean" would hide a mistyped path."""
    target = Path(target)
    if target.exists() or target.is_symlink():
        return
    parent = target.parent
    leftovers = parent.is_dir() and any(
        entry.name.startswith(f".{target.name}.") and entry.name != f".{target.name}.lock"
        for entry in parent.iterdir()
    )
    if not leftovers:
        raise InputError(f"{target} does not exist: nothing of embedkit's there to clean")


def clean_target(target: str | Path) -> tuple[list[Path], bool]:
    """Remove the leftovers of killed runs on `target`; return them, and whether a commit was finished."""
    target = Path(target)
    removed: list[Path] = []
    completed = False
    related = [target]
    if target.suffix == ".npy":
        ids = target.with_name(target.name[: -len(".npy")] + ".ids.txt")
        completed = recover_files(target)
        related.append(ids)
    for path in related:
        removed += sweep_leftovers(path)
    if target.is_dir():
        part_removed, part_completed = _part_leftovers(target)
        removed += part_removed
        completed = completed or part_completed
    removed += clean_versions(target)  # only in a folder that carries embedkit's marker
    run_dir = target.parent / f".{target.name}.overwrite-run"  # a killed `train --overwrite`
    if run_dir.is_dir() and not run_dir.is_symlink():
        shutil.rmtree(run_dir, ignore_errors=True)
        if not run_dir.exists():
            removed.append(run_dir)
    removed += _dead_scratch()
    return removed, completed


def _part_leftovers(folder: Path) -> tuple[list[Path], bool]:
    """Finish the part writes a kill left committed, and remove the rest of killed part writes."""
    stems = sorted({m.group(1) for entry in folder.iterdir() if (m := PART_LEFTOVER.match(entry.name))})
    removed: list[Path] = []
    completed = False
    for stem in stems:
        completed = recover_files(folder / f"{stem}.npy") or completed  # the journal names the .npy
        for suffix in PART_SUFFIXES:
            removed += sweep_leftovers(folder / f"{stem}{suffix}")
    return removed, completed


def _dead_scratch() -> list[Path]:
    removed = []
    for entry in Path(tempfile.gettempdir()).iterdir():
        for prefix in SCRATCH_PREFIXES:
            rest = entry.name[len(prefix):] if entry.name.startswith(prefix) else ""
            pid = rest.split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed
