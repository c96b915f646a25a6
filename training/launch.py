"""`embedkit train --nproc N`: torchrun's launcher in-process, its failures as one line.

The ranks are `python -m embedkit.cli train ...` with the user's own arguments (less `--nproc`),
started by `torch.distributed.run` on one machine with a free port (torchrun's standalone
rendezvous). It is the same as typing ``torchrun --standalone --nproc-per-node N -m embedkit.cli
train ...``, except for what a failure prints: instead of torchrun's multi-line report and every
rank's message, each rank writes its one-line error to a file in the folder `RANK_ERRORS_ENV` names,
and the launcher raises one error naming the cause:

- a rank's own error (bad input, a loss that is no longer finite, a full disk) comes first;
- else a rank killed by a signal (out of memory, `kill -9`): the survivors only lost contact;
- else a rank that failed without a message of ours (a bug: it printed its traceback);
- else the first rank that lost contact, or the first exit code.

Importing this module does not import torch (the CLI reports rank errors through it). Like torchrun,
the launcher sets OMP_NUM_THREADS=1 for the ranks unless it is set already.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from embedkit.errors import EmbedkitError, InputError, RunFailure

# The environment variable that tells the ranks where to write their errors (set by `launch`).
RANK_ERRORS_ENV = "EMBEDKIT_RANK_ERRORS"
RESUME_HINT = "the last checkpoint stays, and --resume continues from it"


def launch(nproc: int, argv: list[str]) -> None:
    """Run `embedkit train ARGV` on `nproc` local ranks; raise `InputError` or `RunFailure` on failure."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "embedkit.cli", "train", *argv])
    with tempfile.TemporaryDirectory(prefix="embedkit-ranks-") as folder, _quiet_torchrun():
        previous = os.environ.get(RANK_ERRORS_ENV)
        os.environ[RANK_ERRORS_ENV] = folder  # the ranks inherit the launcher's environment
        try:
            run(args)
        except ChildFailedError as exc:
            exits = {int(rank): failure.exitcode for rank, failure in exc.failures.items()}
            raise launch_failure(exits, read_rank_errors(Path(folder))) from None
        finally:
            if previous is None:
                os.environ.pop(RANK_ERRORS_ENV, None)
            else:
                os.environ[RANK_ERRORS_ENV] = previous


def write_rank_error(folder: Path, rank: int, exc: EmbedkitError) -> None:
    """What a rank tells the launcher of its failure: one line, its exit code, whether it lost contact."""
    record = {
        "message": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        "exit_code": exc.exit_code,
        "lost_contact": bool(getattr(exc, "lost_contact", False)),
    }
    (folder / f"rank-{rank}.json").write_text(json.dumps(record) + "\n", encoding="utf-8")


def read_rank_errors(folder: Path) -> dict[int, dict]:
    errors = {}
    for path in folder.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError):
            errors[int(path.stem.split("-")[1])] = json.loads(path.read_text(encoding="utf-8"))
    return errors


def launch_failure(exits: dict[int, int], errors: dict[int, dict]) -> EmbedkitError:
    """The one error that explains a failed launch (see the module doc for the order).

    `exits`: the exit codes torchrun saw (negative: killed by that signal); `errors`: what the ranks
    wrote (`write_rank_error`).
    """
    own = [rank for rank in sorted(errors) if not errors[rank]["lost_contact"]]
    if own:
        rank = own[0]
        record = errors[rank]
        prefix = "" if rank == 0 else f"rank {rank}: "
        kind = InputError if record["exit_code"] == 2 else RunFailure
        return kind(prefix + record["message"])
    killed = sorted(r for r, code in exits.items() if code < 0 and -code != signal.SIGTERM)
    if killed:
        rank, number = killed[0], -exits[killed[0]]
        return RunFailure(
            f"rank {rank} was killed ({_signal_name(number)}) and the others were stopped; {RESUME_HINT}"
        )
    crashed = sorted(r for r, code in exits.items() if code > 0 and r not in errors)
    if crashed:  # an unexpected error: the rank printed its traceback
        rank = crashed[0]
        code = exits[rank]
        return RunFailure(f"rank {rank} failed (exit code {code}, its traceback is above); {RESUME_HINT}")
    if errors:  # "rank R lost contact ..."
        return RunFailure(errors[min(errors)]["message"])
    rank = min(exits)
    code = exits[rank]
    how = f"was stopped ({_signal_name(-code)})" if code < 0 else f"exited with code {code}"
    return RunFailure(f"rank {rank} {how}; {RESUME_HINT}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@contextlib.contextmanager
def _quiet_torchrun() -> Iterator[None]:
    """Silence torchrun's own log lines (its settings, the workers it stops, its failure report)."""
    names = [name for name in logging.root.manager.loggerDict if name.startswith("torch.distributed")]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


__all__ = ["RANK_ERRORS_ENV", "launch", "launch_failure", "read_rank_errors", "write_rank_error"]
