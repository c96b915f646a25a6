"""The training loop that `train` and `adapt` share: its schedule, its keep-best rule, its phases."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from embedkit.training.checkpoint import BASE
from embedkit.training.loop import DevScore, Due, Schedule, improves, run


def test_schedule_of_train_and_of_adapt() -> None:
    # train: a dev evaluation every 2 steps and at the end, a checkpoint every 3 and at the end
    train = Schedule(total=7, eval_steps=2, save_steps=3)
    assert [s for s in range(1, 8) if train.evaluates(s)] == [2, 4, 6, 7]
    assert [s for s in range(1, 8) if train.saves(s)] == [3, 6, 7]
    # adapt: a checkpoint at each dev evaluation but the last
    adapt = Schedule(total=6, eval_steps=2, save_steps=2, save_last=False)
    assert [s for s in range(1, 7) if adapt.evaluates(s)] == [2, 4, 6]
    assert [s for s in range(1, 7) if adapt.saves(s)] == [2, 4]
    no_dev = Schedule(total=5, eval_steps=None, save_steps=5)
    assert not any(no_dev.evaluates(s) for s in range(1, 6))


def test_keep_best_takes_the_first_evaluation_then_only_a_higher_score() -> None:
    assert improves(-1e9, None) and improves(float("-inf"), None)
    assert improves(0.6, 0.5) and not improves(0.5, 0.5) and not improves(0.4, 0.5)


class RecordingBest:
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def save(self, step: int, record: dict) -> None:
        self.calls.append(("best.save", step, record["score"]))

    def load(self, step: int) -> None:
        self.calls.append(("best.load", step))

    def load_base(self) -> None:
        self.calls.append(("best.load_base",))


class RecordingJob:
    """A job whose dev scores and kept step are given; it records what the loop asks of it."""

    def __init__(self, scores: dict[int, float], kept, *, done: int = 0, writes: bool = True) -> None:
        self.calls: list = []
        self.scores, self.kept, self.done, self.writes = scores, kept, done, writes
        self.schedule = Schedule(total=8, eval_steps=2, save_steps=4)
        self.best = RecordingBest(self.calls)
        self.best_score = None

    def check(self) -> str:
        self.calls.append(("check",))
        return "checked"

    def build(self, checked: str) -> RecordingJob:
        self.calls.append(("build", checked))
        return self

    def begin(self) -> int:
        self.calls.append(("begin",))
        return self.done

    def progress(self, done: int):
        self.calls.append(("progress", done))
        return nullcontext()

    def step(self, step: int, due: Due) -> None:
        self.calls.append(("step", step, due.evaluate, due.save))

    def evaluate(self, step: int) -> DevScore | None:
        if not self.writes:
            return None
        return DevScore(self.scores[step], {"score": self.scores[step]})

    def selected(self, step: int, dev: DevScore, improved: bool) -> None:
        if improved:
            self.best_score = dev.score
        self.calls.append(("selected", step, improved))

    def save(self, step: int) -> None:
        self.calls.append(("save", step))

    def end_step(self, step: int, due: Due) -> None:
        pass

    def kept_step(self):
        return self.kept

    def finish(self, kept):
        self.calls.append(("finish", kept))
        return "result"


def test_phases_in_order_keep_best_and_the_kept_weights() -> None:
    job = RecordingJob({2: 0.5, 4: 0.3, 6: 0.5, 8: 0.9}, kept=8)
    assert run(job) == "result"
    # each phase hands on what it made: check's result to build
    assert job.calls[:4] == [("check",), ("build", "checked"), ("begin",), ("progress", 0)]
    steps = [c for c in job.calls if c[0] == "step"]
    assert steps == [("step", s, s % 2 == 0, s in (4, 8)) for s in range(1, 9)]
    # a tie with the best (step 6) keeps the earlier step's weights
    assert [c for c in job.calls if c[0] == "best.save"] == [("best.save", 2, 0.5), ("best.save", 8, 0.9)]
    assert [c[1] for c in job.calls if c[0] == "selected" and c[2]] == [2, 8]
    # the best weights are written before the evaluation is reported, the checkpoint after it
    at_8 = job.calls.index(("best.save", 8, 0.9))
    assert job.calls[at_8 + 1 : at_8 + 3] == [("selected", 8, True), ("save", 8)]
    assert job.calls[-2:] == [("best.load", 8), ("finish", 8)]


@pytest.mark.parametrize(("kept", "loads"), [(BASE, [("best.load_base",)]), (None, [])])
def test_the_base_or_the_last_weights(kept, loads) -> None:
    job = RecordingJob({2: 0.5, 4: 0.6, 6: 0.7, 8: 0.8}, kept=kept)
    run(job)
    assert [c for c in job.calls if c[0] in ("best.load", "best.load_base")] == loads
    assert job.calls[-1] == ("finish", kept)


def test_a_resumed_run_starts_after_its_checkpoint_and_other_ranks_write_nothing() -> None:
    job = RecordingJob({6: 0.5, 8: 0.4}, kept=6, done=4, writes=False)
    run(job)
    assert [c[1] for c in job.calls if c[0] == "step"] == [5, 6, 7, 8]
    assert not [c for c in job.calls if c[0].startswith("best.") or c[0] == "selected"]
    assert ("save", 8) in job.calls  # the job's own save decides which process writes


def test_the_train_job_hands_on_what_its_phases_build(tmp_path, tiny_bert, monkeypatch) -> None:
    """`TrainJob` is frozen, and the run it builds sets no attribute after its constructor."""
    import dataclasses

    from training_runs import CORPUS, config

    from embedkit.training import train_run
    from embedkit.training.trainer import TrainJob, train

    assert TrainJob.__dataclass_params__.frozen  # type: ignore[attr-defined]
    job = TrainJob(CORPUS, tmp_path, config(tiny_bert), None, False, False, False, None)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.out = tmp_path / "other"  # type: ignore[misc]
    late: list[str] = []
    constructed: set[int] = set()
    init, setattr_ = train_run.TrainRun.__init__, train_run.TrainRun.__setattr__

    def built(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        constructed.add(id(self))

    def watched(self, name: str, value: object) -> None:
        if id(self) in constructed:
            late.append(name)
        setattr_(self, name, value)

    monkeypatch.setattr(train_run.TrainRun, "__init__", built)
    monkeypatch.setattr(train_run.TrainRun, "__setattr__", watched)
    cfg = config(tiny_bert, eval_steps=2, save_steps=2)  # checkpoints and the last step's read
    train(CORPUS, tmp_path / "out", cfg, progress=False)
    assert constructed and late == []
