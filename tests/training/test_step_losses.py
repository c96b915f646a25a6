"""`embedkit train` on CPU gives, step for step, the losses recorded in `step_losses.json` for every
method and ablation (how they were made: `step_losses.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from step_losses import FIXTURE, RUNS, STEPS, step_losses

RECORDED = json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_step_gives_the_recorded_losses(tmp_path: Path, tiny_bert: Path, run: str) -> None:
    got = step_losses(run, tiny_bert, tmp_path)
    expected = RECORDED[run]
    assert len(got) == len(expected) == STEPS
    for step, (terms, recorded) in enumerate(zip(got, expected, strict=True), start=1):
        assert terms.keys() == recorded.keys(), f"step {step}"
        # the fused attention kernel outside AMI's layers sums in another order: float32 rounding
        assert terms == pytest.approx(recorded, rel=1e-5, abs=1e-6), f"{run}, step {step}"
