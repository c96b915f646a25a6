"""The work a reader of a folder corpus may spend on one file, and what happens past it.

A file's bytes do not bound the work of reading it: a 65 KB DOCX can hold 3 million empty
paragraphs (a zip archive inflates), a 49 MB HTML page 7 million empty elements, a short PDF page
can draw the same form a million times. So each reader counts the units its library builds or
runs (HTML nodes, DOCX elements, PDF pages and content operators) with a `WorkBudget`, and stops
at a stated bound; a clock bounds what the counts do not foresee (`MAX_READ_SECONDS`, checked as
the units are counted, on top of them).

A file past any bound of its reader (its bytes, its text, its units, the clock) is a
`BeyondBounds`: the folder reader skips that file, counts it with its reason
(`ReadStats.skipped`), and reads the rest. Every other refusal (a damaged file, text that is not
Unicode) still stops the corpus: those are the user's to fix, a large file is not an error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from embedkit.errors import InputError

# The clock's bound on one file, on top of the counted ones: a backstop, never the rule (a count is
# the same on every machine, a clock is not). Each counted bound takes about 20 s on 2 busy cores.
MAX_READ_SECONDS = 120.0
_CLOCK_EVERY = 1024  # units counted between two looks at the clock


class BeyondBounds(InputError):
    """A file past a bound of its reader; the message names the file and the bound. A folder
    corpus skips the file and reads the rest (`embedkit.data.textfolder`)."""


class WorkBudget:
    """Counts the units a reader spends on `path` (`spend`), a `BeyondBounds` past `limit` of them
    or past `MAX_READ_SECONDS` since the budget was made."""

    def __init__(self, path: Path, limit: int, units: str, advice: str = "split it into parts") -> None:
        self.path = path
        self.limit = limit
        self.units = units  # plural, as a message says it: "HTML nodes (elements, attributes, texts)"
        self.advice = advice
        self.spent = 0
        self._deadline = time.monotonic() + MAX_READ_SECONDS
        self._next_look = _CLOCK_EVERY

    def spend(self, units: int = 1) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise BeyondBounds(
                f"{self.path} holds over {self.limit:,} {self.units}, the most a reader of a folder "
                f"corpus reads in one file: {self.advice}"
            )
        if self.spent >= self._next_look:
            self._next_look = self.spent + _CLOCK_EVERY
            self.check_clock()

    def check_clock(self) -> None:
        if time.monotonic() > self._deadline:
            raise BeyondBounds(
                f"{self.path} took over {MAX_READ_SECONDS:,.0f} s to read ({self.spent:,} {self.units} "
                f"read), the most a reader of a folder corpus spends on one file: {self.advice}"
            )


@contextmanager
def library_errors(path: Path, kind: str) -> Iterator[None]:
    """A parser's failure on a damaged file as one `InputError` naming it. Libraries raise anything
    from ValueError to KeyError on bad bytes, so every Exception is caught here, around their calls;
    an `InputError` (`BeyondBounds` included) passes as it is."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:  # RecursionError included: a PDF's objects may nest without end
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(
            f"{path} cannot be read as {kind} (damaged, or not {kind}): {reason[:200]}"
        ) from None
