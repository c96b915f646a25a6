"""Where a run writes: `OUT` itself, an unfinished run in it to resume, or a hidden sibling.

`embedkit train` and `embedkit adapt` check `OUT` before anything is written (`prepare_out_dir`): an
empty or missing folder is used, an unfinished run (a checkpoint in it) continues with `--resume`,
and anything else needs `--overwrite`. A run that replaces a non-empty folder keeps its checkpoints
in a hidden sibling (`overwrite_run_dir`) until the new model replaces `OUT`, so a failure or a kill
leaves the old folder exactly as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from embedkit.errors import InputError
from embedkit.training.checkpoint import latest_checkpoint


def prepare_out_dir(out: Path, resume: bool, overwrite: bool) -> Path | None:
    """Check what `out` holds; return the checkpoint to resume from, or None to start afresh."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder")
    latest = latest_checkpoint(out) if out.is_dir() else None
    busy = holds_files(out)
    if resume:
        if latest is None and busy and not overwrite:
            raise InputError(f"nothing to resume in {out}: it holds no checkpoint (a finished model?)")
        return latest
    if busy and not overwrite:
        if latest is not None:
            raise InputError(f"{out} holds an unfinished run: pass --resume to continue it, or --overwrite")
        raise InputError(f"{out} is not empty: choose another --out, or pass --overwrite to replace it")
    return None


def holds_files(out: Path) -> bool:
    return out.is_dir() and any(out.iterdir())


def replaces(out: Path, resume_from: Path | None) -> bool:
    """Whether a run that does not resume replaces a non-empty `out` (`prepare_out_dir` has checked
    that the user asked for it)."""
    return resume_from is None and holds_files(out)


def run_dir(out: Path, replacing: bool, writes: bool = True) -> Path:
    """Where the run keeps its checkpoints: `out`, or while it replaces `out`, its hidden sibling,
    emptied by the process that writes (the others only need its path)."""
    if not replacing:
        return out
    return overwrite_run_dir(out) if writes else overwrite_run_path(out)


def overwrite_run_path(out: Path) -> Path:
    """Where a run that will replace the non-empty `out` keeps its checkpoints: a hidden sibling."""
    return out.parent / f".{out.name}.overwrite-run"


def overwrite_run_dir(out: Path) -> Path:
    """`overwrite_run_path`, emptied: the caller holds `out`'s write lock, so a folder already there
    is a killed run's."""
    run_dir = overwrite_run_path(out)
    shutil.rmtree(run_dir, ignore_errors=True)
    return run_dir


__all__ = [
    "holds_files",
    "overwrite_run_dir",
    "overwrite_run_path",
    "prepare_out_dir",
    "replaces",
    "run_dir",
]
