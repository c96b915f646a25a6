"""The training loop of `embedkit train` and `embedkit adapt`, to be read top to bottom.

Both runs go through the same phases in the same order: check every input, build the model, resume
from the last checkpoint (or score the untrained base on the dev set), run the steps with dev
selection and checkpoints, then write the model folder from the best step's weights, or from the
base model's when no step may replace it. What differs is the job (`Job`): `trainer.TrainJob`
(miCSE and its siblings on a corpus) and `adapt.run.AdaptJob` (distilling an index's hybrid
ranking) supply their checks and what they build from them (`Steps`): their step, their dev
evaluation, their checkpoint and their writer. Each phase hands on what it made: `check`'s result
to `build`, whose result runs the steps.
The loop owns the order and the keep-best rule; `checkpoint` owns what lands on disk.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from embedkit.training.checkpoint import BASE, BestWeights, Kept

Result = TypeVar("Result", covariant=True)


@dataclass(frozen=True)
class Schedule:
    """Which steps (1 to `total`) are followed by a dev evaluation and which by a checkpoint."""

    total: int
    eval_steps: int | None  # None: no dev set, no evaluation
    save_steps: int
    save_last: bool = True  # a checkpoint after the last step too (then a failed write resumes at once)

    def evaluates(self, step: int) -> bool:
        return self.eval_steps is not None and (step % self.eval_steps == 0 or step == self.total)

    def saves(self, step: int) -> bool:
        return self.save_last if step == self.total else step % self.save_steps == 0


@dataclass(frozen=True)
class Due:
    """What follows this step's update; a step that knows it can prepare (read its losses first)."""

    evaluate: bool
    save: bool


@dataclass(frozen=True)
class DevScore:
    """One dev evaluation: the score the best step is chosen on (larger is better), and what the
    best step's `best.json` records of it."""

    score: float
    record: dict[str, object]


def improves(score: float, best: float | None) -> bool:
    """The keep-best rule: the first evaluation, then only a strictly higher score (ties keep the earlier)."""
    return best is None or score > best


class Steps(Protocol[Result]):
    """What a job builds to run the steps; its methods are called in the order listed."""

    schedule: Schedule
    best: BestWeights  # where the weights of a dev improvement go, and the base they fall back to
    writes: bool  # this process writes the run's files (rank 0 of several)

    def begin(self) -> int:
        """3. Resume from the last checkpoint, or score the base; the number of steps already done."""

    def progress(self, done: int) -> AbstractContextManager[object]:
        """What the user sees while the steps run."""

    def step(self, step: int, due: Due) -> None:
        """4. One update."""

    def evaluate(self, step: int) -> DevScore | None:
        """The dev score after `step`; None on a process that does not evaluate."""

    @property
    def best_score(self) -> float | None:
        """The best dev score of a step so far (None before the first evaluation)."""

    def selected(self, step: int, dev: DevScore, improved: bool) -> None:
        """Remember and report the evaluation of `step` (its weights are kept already if `improved`)."""

    def save(self, step: int) -> None:
        """A checkpoint a killed run continues from."""

    def end_step(self, step: int, due: Due) -> None:
        """After the step's evaluation and checkpoint (other processes wait here for them)."""

    def kept_step(self) -> Kept:
        """5. The step whose weights become the model, `BASE`, or None for the weights as they are."""

    def finish(self, kept: Kept) -> Result:
        """Write the model folder from the weights now in the model; the run's result."""


class Job(Protocol[Result]):
    """What one kind of run supplies to `run`: its checks, then what it builds from them."""

    def check(self) -> Any:
        """1. Every input, before anything is written: `InputError` for bad input; what `build` needs."""

    def build(self, checked: Any) -> Steps[Result]:
        """2. The model, its data, optimizer, schedule and random generators, from `check`'s result."""


def run(job: Job[Result]) -> Result:
    """Run `job` from its checks to its model folder."""
    # 1-2. Nothing is written before the inputs are checked; the model comes after them.
    steps = job.build(job.check())

    # 3. Where the steps start: a checkpoint's step, or 0 with the base model's dev score.
    done = steps.begin()

    # 4. The steps. After the update, a dev evaluation keeps the weights of each improvement
    # (`best-N/`), then a checkpoint lets a killed run continue where it stopped.
    schedule = steps.schedule
    with steps.progress(done):
        for step in range(done + 1, schedule.total + 1):
            due = Due(schedule.evaluates(step), schedule.saves(step))
            steps.step(step, due)
            dev = steps.evaluate(step) if due.evaluate else None
            if dev is not None:
                improved = improves(dev.score, steps.best_score)
                if improved:
                    steps.best.save(step, dev.record)
                steps.selected(step, dev, improved)
            if due.save:
                steps.save(step)
            steps.end_step(step, due)

    # 5. The model folder: the kept step's weights, else the base model's, else the last weights.
    kept = steps.kept_step()
    if steps.writes and kept == BASE:
        steps.best.load_base()
    elif steps.writes and kept is not None:
        steps.best.load(kept)
    return steps.finish(kept)


__all__ = ["Due", "DevScore", "Job", "Schedule", "Steps", "improves", "run"]
