"""Errors that the CLI turns into one line on stderr and an exit code.

`InputError` (exit 2) means the user handed us something we cannot use: a missing file, an
empty corpus, a folder that is not a model. `RunFailure` (exit 1) means the input was fine
but the job failed while running: a parity gate, a NaN loss. Library code raises these and
never calls `sys.exit`.
"""

from __future__ import annotations


class EmbedkitError(Exception):
    """Base class of every error embedkit raises on purpose."""

    exit_code = 1


class InputError(EmbedkitError, ValueError):
    """Bad input or arguments: a missing file, an unknown format, a model that does not fit."""

    exit_code = 2


class RunFailure(EmbedkitError, RuntimeError):
    """A failure while running on valid input, such as a failed parity gate or a NaN loss."""

    exit_code = 1
