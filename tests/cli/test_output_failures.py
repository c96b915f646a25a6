"""The writers beyond the atomic ones: a lock file on a full disk, and results on a standard output
that cannot be written. Each is one line and exit 1, never a traceback.

Standard output is the real device /dev/full (every write to it fails with ENOSPC) in a separate
process; the lock file's full disk is simulated (no test may fill a real disk).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.storage import locking

CORPUS = "".join(f"wing flow number {n} over the airfoil\n" for n in range(12))
STS = "sentence1\tsentence2\tscore\na cat\ta dog\t1.0\nwings\tflow\t3.5\nsun\tmoon\t2.0\n"
FULL = "error: cannot write the results to standard output: no space left on device"
CLI = "import sys; from embedkit.cli.app import main; sys.argv[0] = 'embedkit'; main()"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("stdout")
    (folder / "c.txt").write_text(CORPUS, encoding="utf-8")
    (folder / "s.tsv").write_text(STS, encoding="utf-8")
    result = CliRunner().invoke(
        app, ["index", str(folder / "c.txt"), "--out", str(folder / "idx"), "--model", str(tiny_bert)]
    )
    assert result.exit_code == 0, result.output
    return {"{index}": str(folder / "idx"), "{sts}": str(folder / "s.tsv"), "{model}": str(tiny_bert)}


# The commands that print results (or help, or versions) on standard output.
PRINTERS = {
    "--version": ["--version"],
    "search --help": ["search", "--help"],
    "search --json": ["search", "{index}", "wing flow", "--json"],
    "search (table)": ["search", "{index}", "wing flow"],
    "search --queries --json": ["search", "{index}", "--queries", "{sts}", "--json"],
    "eval sts": ["eval", "sts", "{sts}", "--model", "{model}"],
}


@pytest.mark.parametrize("command", list(PRINTERS))
def test_results_to_a_full_standard_output_are_one_line_and_exit_1(command: str, inputs) -> None:
    args = [inputs.get(a, a) for a in PRINTERS[command]]
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", CLI, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300
        )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1, done.stderr
    assert errors == [FULL], done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def _is_lock(target: int | str | os.PathLike[str]) -> bool:
    name = os.readlink(f"/proc/self/fd/{target}") if isinstance(target, int) else os.fspath(target)
    return name.endswith(".lock")


@pytest.mark.parametrize("step", ["create", "pid"])
@pytest.mark.parametrize("command", ["embed", "index"])
def test_a_lock_file_on_a_full_disk_is_one_line_and_exit_1(command, step, tmp_path, tiny_bert, monkeypatch):
    real_open, real_write = os.open, os.write

    def full_open(path, flags, *args, **kwargs):
        if step == "create" and flags & os.O_CREAT and _is_lock(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def full_write(fd, data):
        if step == "pid" and _is_lock(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # os.write names no file
        return real_write(fd, data)

    monkeypatch.setattr(locking.os, "open", full_open)
    monkeypatch.setattr(locking.os, "write", full_write)
    corpus = tmp_path / "c.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    out = tmp_path / ("v.npy" if command == "embed" else "idx")
    result = CliRunner().invoke(app, [command, str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: no space left on device writing {out} ("), lines
    assert not out.exists()


def test_the_training_log_on_a_full_disk_is_a_write_failure(tmp_path, monkeypatch):
    """`metrics.jsonl` is appended to, not written atomically: its full disk is named all the same."""
    pytest.importorskip("torch")
    from embedkit.storage.write_failures import WriteFailure
    from embedkit.training.checkpoint import append_metrics

    log = tmp_path / "metrics.jsonl"
    real_open = Path.open

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a file write names no file

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Full(real_open(self, *a, **k)))
    with pytest.raises(WriteFailure) as caught:
        append_metrics(log, {"step": 1})
    assert str(caught.value).startswith(f"no space left on device writing {log} (")
