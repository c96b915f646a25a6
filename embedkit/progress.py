"""The one progress bar of every command: rich, on stderr (stdout stays clean for results).

Columns: description, bar, done/total, a status text (a rate such as "1,234 sent/s", a run's
loss, ...), time remaining or elapsed. Disabled bars cost nothing and print nothing.
"""

from __future__ import annotations

from typing import Any


class ProgressBar:
    """A rich progress bar; `with ProgressBar(n, "embedding", rate_unit="sent/s") as bar: bar.advance(k)`."""

    def __init__(
        self,
        total: int | None,  # None: unknown (a stream read once); the bar then counts up
        description: str,
        *,
        enabled: bool = True,
        completed: int = 0,
        rate_unit: str | None = None,  # show the speed as the status, in these units
        elapsed: bool = False,  # time elapsed instead of time remaining
        transient: bool = False,  # remove the bar when done
        console: Any = None,  # a rich Console to share with notes; default: a new one on stderr
    ) -> None:
        self.rate_unit = rate_unit
        self._progress = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from embedkit.console import make_console

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn() if elapsed else TimeRemainingColumn(),
            console=console or make_console(stderr=True),
            transient=transient,
        )
        self._task = self._progress.add_task(description, total=total, completed=completed, status="")

    def __enter__(self) -> ProgressBar:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._progress is not None:
            self._progress.start()

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, n: int = 1) -> None:
        if self._progress is None:
            return
        self._progress.advance(self._task, n)
        if self.rate_unit:
            speed = self._progress.tasks[0].speed
            if speed:
                self._progress.update(self._task, status=f"{speed:,.0f} {self.rate_unit}")

    def update(self, *, completed: int | None = None, status: str | None = None) -> None:
        if self._progress is None:
            return
        fields: dict[str, Any] = {}
        if completed is not None:
            fields["completed"] = completed
        if status is not None:
            fields["status"] = status
        self._progress.update(self._task, **fields)
