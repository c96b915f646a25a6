"""What `embedkit train` shows while it runs: a progress bar with the loss terms, and one-line notes.

With several ranks only rank 0 shows anything (the trainer disables the others' display).
"""

from __future__ import annotations


class TrainDisplay:
    """A rich progress bar with the loss terms, and one-line notes, on stderr (or nothing)."""

    def __init__(self, total: int, enabled: bool) -> None:
        from embedkit.console import make_console

        self.total, self.enabled, self.progress = total, enabled, None
        self.speed = ""  # sentences per second, as of the last loss read
        self.console = make_console(stderr=True, quiet=not enabled)

    def note(self, text: str) -> None:
        self.console.print(text)

    def start(self, step: int) -> None:
        from embedkit.progress import ProgressBar

        if self.enabled:
            self.progress = ProgressBar(self.total, "training", completed=step, console=self.console)
            self.progress.start()

    def rate(self, sentences_per_s: float) -> None:
        self.speed = f"{sentences_per_s:,.0f} sent/s"

    def advance(self, step: int, terms: dict[str, float]) -> None:
        if self.progress is not None:
            self.progress.update(
                completed=step, status=" ".join(filter(None, [format_terms(terms), self.speed]))
            )

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def format_terms(terms: dict[str, float]) -> str:
    """`loss 0.1234 info_nce 0.1200 ...`: the loss terms on one line."""
    return " ".join(f"{k} {v:.4f}" for k, v in terms.items())


__all__ = ["TrainDisplay", "format_terms"]
