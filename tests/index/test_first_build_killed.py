"""A first build killed at any step leaves a folder that every command reads the same way, and the
same command run again finishes the job (docs/guarantees.md, section 13).

References: the fault points are read from the source (every `fault_point("...")`), so a step added
later is killed too; the process is killed with SIGKILL (no `finally`, no clean-up), as a power cut
or the OOM killer would. What must hold after each kill is stated without the code under test: the
folder holds the complete index or no index; `search`, `verify` and `clean` agree on which, with one
line each; the same `index` command run again exits 0 and the index then searches.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.storage import atomic

_SOURCE = Path(__file__).resolve().parents[2] / "embedkit"


def _fault_points() -> list[str]:
    """Every step a test may kill at, as the code names them (`files-moved-{n}`: its first, n = 1)."""
    names: set[str] = set()
    for path in _SOURCE.rglob("*.py"):
        for literal in re.findall(r"fault_point\(f?\"([^\"]+)\"\)", path.read_text(encoding="utf-8")):
            names.add(re.sub(r"\{[^}]*\}", "1", literal))
    return sorted(names)


FAULT_POINTS = _fault_points()


def test_the_fault_points_are_found():
    assert {"version-staged", "version-renamed", "version-switched"} <= set(FAULT_POINTS)


def _cli(*args: str):
    result = CliRunner().invoke(app, [*args])
    return result.exit_code, result.stdout, result.stderr.strip().splitlines()


@pytest.fixture(scope="module")
def notes(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("notes")
    for name, text in {"wing.txt": "lift over a swept wing", "flow.txt": "boundary layer flow"}.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _build_args(notes: Path, out: Path, model: Path) -> list[str]:
    return ["index", str(notes), "--out", str(out), "--model", str(model), "--kind", "flat", "--no-calibrate"]


def _killed_build(notes: Path, out: Path, model: Path, step: str) -> bool:
    """`embedkit index` run in a process of its own, killed at `step`; whether the kill came."""
    command = [sys.executable, "-m", "embedkit.cli.app", *_build_args(notes, out, model)]
    env = {**os.environ, atomic.FAULT_ENV: step, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def first_build_steps(notes, tmp_path_factory, tiny_bert) -> list[str]:
    """The fault points a first build passes, in order (recorded by the test hook, no kill)."""
    passed: list[str] = []
    atomic.fault_hook = passed.append
    try:
        code, _, lines = _cli(*_build_args(notes, tmp_path_factory.mktemp("whole") / "idx", tiny_bert))
    finally:
        atomic.fault_hook = None
    assert code == 0, lines
    return passed


@pytest.mark.parametrize("step", FAULT_POINTS)
def test_a_first_build_killed_at_any_step_is_read_alike_and_finished_by_a_rerun(
    step, notes, tmp_path, tiny_bert, first_build_steps
):
    if step not in first_build_steps:
        pytest.skip(f"a first build does not pass {step}")
    out = tmp_path / "idx"
    assert _killed_build(notes, out, tiny_bert, step)
    left = tmp_path / "left"  # what the kill left, for a rerun without clean
    shutil.copytree(out, left, symlinks=True)
    search = _cli("search", str(out), "wing", "--mode", "dense", "-k", "1")
    verify = _cli("verify", str(out))
    if search[0] == 0:  # the build was published: the index is whole, and every command says so
        assert verify[0] == 0, (step, verify)
        assert "wing.txt" in search[1]
    else:  # nothing published: each says so in one line, the same story
        for code, _, lines in (search, verify):
            assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (step, lines)
            assert "holds no index" in lines[0] or not out.exists(), (step, lines)
    if out.exists():
        cleaned = _cli("clean", str(out))
        assert cleaned[0] == 0 and not cleaned[2], (step, cleaned)
        assert (_cli("search", str(out), "wing", "--mode", "dense", "-k", "1")[0] == 0) == (search[0] == 0)
    # the same command again (after clean, or straight after the kill) finishes the job
    for again in (out, left):
        rerun = _cli(*_build_args(notes, again, tiny_bert))
        published = search[0] == 0  # a finished build: run again, it says so
        assert rerun[0] == 0 or (published and "already holds an index" in rerun[2][0]), (step, rerun)
        code, stdout, _ = _cli("search", str(again), "wing", "--mode", "dense", "-k", "1")
        assert code == 0 and "wing.txt" in stdout, (step, stdout)
        assert _cli("verify", str(again))[0] == 0
