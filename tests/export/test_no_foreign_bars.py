"""`export` and `eval` print embedkit's lines only: no transformers or hub progress bars."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FOREIGN = ("Loading weights", "Writing model shards", "%|")


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}  # as a user has it
    command = [sys.executable, "-c", "from embedkit.cli.app import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_export_and_eval_print_no_foreign_progress_bars(tiny_bert: Path, tmp_path: Path):
    exported = run("export", str(tiny_bert), "--out", str(tmp_path / "onnx"))
    assert exported.returncode == 0, exported.stderr
    sts = tmp_path / "sts.tsv"
    rows = ["a wing\tthe wing\t4.0", "a cat\tan engine\t0.5", "a dog\tthe dog\t3.5"]
    sts.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    evaluated = run("eval", "sts", str(sts), "--model", str(tiny_bert), "--device", "cpu")
    assert evaluated.returncode == 0, evaluated.stderr
    for result in (exported, evaluated):
        output = result.stdout + result.stderr
        assert not [marker for marker in FOREIGN if marker in output], output
