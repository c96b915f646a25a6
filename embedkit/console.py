"""The one rich console that commands, progress bars and training notes print through.

Rich hard-wraps what it prints at the console's width: the terminal's, `COLUMNS`, or 80 when
output is not a terminal. A status line then reads differently in every terminal and breaks the
scripts that read it. So lines are soft-wrapped (the terminal folds a long line; the text keeps
its one line), and tables may fold their text at spaces but never split a word, so a path or a
number is always whole: a table that cannot fit is printed wider than the terminal instead.
"""

from __future__ import annotations

from typing import Any

# Wide enough that measuring a cell is never limited by the width measured against.
_UNBOUNDED = 1_000_000


def make_console(*, stderr: bool = False, quiet: bool = False) -> Any:
    """A rich Console on stdout (results) or stderr (status): no hard wrap, no colouring of numbers."""
    from rich.console import Console

    return Console(stderr=stderr, quiet=quiet, soft_wrap=True, highlight=False)


def print_table(console: Any, table: Any) -> None:
    """Print a rich `table` whose columns are never narrower than their longest word."""
    from rich.measure import Measurement

    options = console.options.update_width(_UNBOUNDED)
    for column in table.columns:
        # rich narrows every column when the table is too wide, splitting words with "…";
        # a minimum width it keeps to, measured on the header and the cells, prevents that.
        words = [Measurement.get(console, options, cell).minimum for cell in (column.header, *column.cells)]
        column.min_width = max(column.min_width or 0, *words)
    console.print(table)


__all__ = ["make_console", "print_table"]
