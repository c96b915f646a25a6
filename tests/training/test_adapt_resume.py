"""`embedkit adapt --resume`: a killed run continues from its checkpoint to the unkilled run's model."""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
from fixture_text import AERO_WORDS
from safetensors.numpy import load_file
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.run import adapt

adapt_module = importlib.import_module("embedkit.training.adapt.run")
STEPS, EVAL_STEPS, KILLED_AT = 6, 2, 5  # checkpoints after steps 2 and 4; killed inside step 5


def _index(tmp_path: Path, tiny_bert: Path) -> Path:
    rng = random.Random(0)
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as file:
        for i in range(24):
            text = " ".join(" ".join(rng.choice(AERO_WORDS) for _ in range(7)) + "." for _ in range(3))
            title = " ".join(rng.sample(AERO_WORDS, 3))
            file.write(json.dumps({"_id": f"d{i}", "title": title, "text": text}) + "\n")
    index = tmp_path / "index"
    made = CliRunner().invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)])
    assert made.exit_code == 0, made.output
    return index


def _config() -> AdaptConfig:
    return AdaptConfig(steps=STEPS, eval_steps=EVAL_STEPS, batch_size=4, learning_rate=1e-3, dev_queries=6)


def _weights(model: Path) -> dict[str, np.ndarray]:
    return load_file(str(model / "model.safetensors"))


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs (not an Exception, so nothing catches it)."""


def test_a_killed_adapt_resumes_to_the_same_model(
    tmp_path: Path, tiny_bert: Path, one_thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = _index(tmp_path, tiny_bert)
    whole = adapt(index, tmp_path / "whole", _config(), progress=False)

    real_step = adapt_module.optimizer_step
    calls = {"n": 0}

    def dies_at_step_five(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == KILLED_AT:
            raise Killed
        return real_step(*args, **kwargs)

    monkeypatch.setattr(adapt_module, "optimizer_step", dies_at_step_five)
    with pytest.raises(Killed):
        adapt(index, tmp_path / "killed", _config(), progress=False)
    monkeypatch.setattr(adapt_module, "optimizer_step", real_step)
    left = sorted(p.name for p in (tmp_path / "killed" / "checkpoints").iterdir())
    assert "step-000004" in left and "step-000002" not in left  # the older checkpoint was pruned
    assert not (tmp_path / "killed" / "model.safetensors").exists()

    # without --resume the unfinished run is not overwritten by accident
    again = CliRunner().invoke(app, ["adapt", str(index), "--out", str(tmp_path / "killed"), "-q"])
    assert again.exit_code == 2 and "pass --resume" in again.output
    # other settings than the checkpoint's are refused
    other = CliRunner().invoke(
        app,
        ["adapt", str(index), "--out", str(tmp_path / "killed"), "--resume", "--lr", "2e-3", "-q"],
    )
    assert other.exit_code == 2 and "learning_rate" in other.output, other.output

    resumed = adapt(index, tmp_path / "killed", _config(), resume=True, progress=False)
    assert resumed.resumed_from == 4
    assert (resumed.best_step, resumed.adapted_scores) == (whole.best_step, whole.adapted_scores)
    assert resumed.base_scores == whole.base_scores
    expected, got = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    assert expected.keys() == got.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert not (tmp_path / "killed" / "checkpoints").exists()  # the finished folder replaced them


def test_resume_after_the_model_goes_on_to_reembedding(tmp_path: Path, tiny_bert: Path, one_thread) -> None:
    index = _index(tmp_path, tiny_bert)
    out = tmp_path / "m"
    runner = CliRunner()
    base = ["adapt", str(index), "--out", str(out), "--steps", "4", "--batch-size", "4", "-q"]
    base += ["--lr", "1e-3", "--eval-steps", "1", "--select", "pseudo", "--force"]
    first = runner.invoke(app, [*base, "--no-reindex"])  # as if killed while re-embedding
    assert first.exit_code == 0, first.output
    lines = first.output.splitlines()  # the notes on stderr are mixed in: find the table
    header = next(i for i, line in enumerate(lines) if line.split() == ["base", "adapted", "delta"])
    assert lines[header + 1].startswith("dev pseudo ndcg@10 (selects)")
    base_score, adapted, delta = (float(x) for x in lines[header + 1].split()[-3:])
    assert delta == pytest.approx(adapted - base_score, abs=0.011)
    info = json.loads((out / "embedkit.json").read_text())
    assert info["adapt"]["dev"]["best_step"] is not None  # a model other than the base: re-embedding is due
    assert info["adapt"]["dev"]["base_scores"]["dev pseudo ndcg@10"] == pytest.approx(
        base_score / 100, abs=5e-5
    )

    resumed = runner.invoke(app, [*base, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "holds the finished adapted model" in resumed.output and "re-embedded" in resumed.output
    once_more = runner.invoke(app, [*base, "--resume"])
    assert once_more.exit_code == 0, once_more.output
    assert "already embedded with the adapted model" in once_more.output
