"""A full disk or an output folder made unwritable during a run: one line naming the output, exit 1,
no temporary files left, the previous output unchanged (simulated: the tests run as root, where
chmod does not stop a write, and no test may fill a real disk)."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app

CORPUS = "".join(f"wing flow number {n} over the airfoil\n" for n in range(20))
STS = "sentence1\tsentence2\tscore\na cat\ta dog\t1.0\nwings\tflow\t3.5\nsun\tmoon\t2.0\n"
runner = CliRunner()


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def failed_once(result, message: str) -> str:
    """The run's only stderr line: exit 1, `message` in it, no traceback."""
    assert result.exit_code == 1, result.output
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.output
    return result.stderr


def leftovers(folder: Path) -> list[str]:
    """Temporary files and staging folders in `folder` (lock files are not leftovers)."""
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name or p.name.startswith(".staging-"))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS)
    return path


def test_embed_on_a_full_disk_reserves_its_space_first(tmp_path, corpus, tiny_bert, monkeypatch):
    # Writing into a sparse memory map on a full disk is SIGBUS; reserving the space first makes it ENOSPC.
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    out = tmp_path / "out" / "vectors.npy"
    result = runner.invoke(app, ["embed", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    line = failed_once(result, f"error: no space left on device writing {out} (")
    assert "free there" in line
    assert leftovers(out.parent) == [] and not out.exists()


def test_index_on_a_full_disk(tmp_path, corpus, tiny_bert, monkeypatch):
    import faiss

    def faiss_full(index, path):  # faiss reports a failed write in a RuntimeError, with strerror
        message = f"Error: 'ret == (1)' failed: write error in {path}: 0 != 1 (No space left on device)"
        raise RuntimeError(message)

    out = tmp_path / "idx"
    monkeypatch.setattr(faiss, "write_index", faiss_full)
    result = runner.invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    failed_once(result, f"error: no space left on device writing {out} (")
    assert leftovers(out) == []
    monkeypatch.undo()

    from embedkit.index.docstore import DocStore

    def sqlite_full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(DocStore, "add", sqlite_full)
    result = runner.invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    failed_once(result, f"error: no space left on device writing {out} (")
    assert leftovers(out) == []


def test_eval_json_on_a_full_disk(tmp_path, tiny_bert, monkeypatch):
    sts = tmp_path / "sts.tsv"
    sts.write_text(STS)
    out = tmp_path / "results.json"
    out.write_text("{}\n")  # a previous result: kept as it was
    write_text = Path.write_text

    def full_for_results(self, *args, **kwargs):
        if self.name.startswith(".results.json."):
            no_space()
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_for_results)
    result = runner.invoke(app, ["eval", "sts", str(sts), "--model", str(tiny_bert), "--json", str(out)])
    failed_once(result, f"error: no space left on device writing {out} (")
    assert leftovers(tmp_path) == [] and out.read_text() == "{}\n"


def test_output_folder_made_unwritable_during_embed(tmp_path, corpus, tiny_bert, monkeypatch):
    import embedkit.storage.atomic

    out = tmp_path / "out" / "vectors.npy"

    def denied(path, data):  # the commit journal is the first new file created after the embedding
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(embedkit.storage.atomic, "write_json_atomic", denied)
    result = runner.invoke(app, ["embed", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    failed_once(result, f"error: cannot write {out}: permission denied")
    assert leftovers(out.parent) == [] and not out.exists()


def test_output_folder_made_unwritable_during_index(tmp_path, corpus, tiny_bert, monkeypatch):
    import embedkit.storage.versioned

    out = tmp_path / "idx"

    def denied(source, target):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(source), None, str(target))

    monkeypatch.setattr(embedkit.storage.versioned.os, "rename", denied)
    result = runner.invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    failed_once(result, f"error: cannot write {out}: permission denied")
    assert leftovers(out) == []
