"""Milvus Lite paths and Milvus Lite's own failures: one embedkit line saying what happened.

A table of ways a `.db` target goes wrong (a plain file, a FIFO, a missing database read, the
database open in another process, a full disk or an unwritable folder when it starts or while
rows are written), each run through `embedkit push` or `embedkit search`: one `error:` line with
the cause, the exit code of its kind (2 for input, 1 for a full disk), nothing of Milvus Lite's
own logging on stderr, and no `.db` created by a reader. The disk faults are simulated inside
Milvus Lite (it runs in-process); no test fills a real disk.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app

pytest.importorskip("faiss")
pytest.importorskip("pymilvus")
milvus_lite = pytest.importorskip("milvus_lite")

CORPUS = "".join(f"wing flow number {n} over the airfoil\n" for n in range(8))
HOLD = """
import sys, time
from pathlib import Path
from milvus_lite.db import MilvusLite
db = MilvusLite(sys.argv[1])  # creates an empty database and holds it open
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.05)
db.close()
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    folder = tmp_path_factory.mktemp("lite")
    (folder / "c.txt").write_text(CORPUS, encoding="utf-8")
    result = CliRunner().invoke(
        app, ["index", str(folder / "c.txt"), "--out", str(folder / "idx"), "--model", str(tiny_bert)]
    )
    assert result.exit_code == 0, result.output
    return folder / "idx"


@pytest.fixture
def root_records() -> Iterator[list[logging.LogRecord]]:
    """The log records that reach the root logger (pytest's own capture sits on other loggers too)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    yield records
    logging.getLogger().removeHandler(handler)


def _raise_for_db(code: int):
    """A stand-in for `os.makedirs` that fails with `code` for paths inside a `.db` folder."""
    real = os.makedirs

    def makedirs(name, *args, **kwargs):
        if ".db" in os.fspath(name):
            raise OSError(code, os.strerror(code), os.fspath(name))
        return real(name, *args, **kwargs)

    return makedirs


def _full_wal(self, record_batch):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# (case, command, exit code, words of the line); the setup is in `_prepare`
CASES = [
    ("a plain file", "push", 2, "is a file, not a Milvus Lite database"),
    ("a plain file", "search", 2, "is a file, not a Milvus Lite database"),
    ("a FIFO", "push", 2, "is a pipe or FIFO, not a Milvus Lite database"),
    ("missing", "search", 2, "no Milvus Lite database at"),
    ("open elsewhere", "push", 2, "is open in another process"),
    ("open elsewhere", "search", 2, "is open in another process"),
    ("unwritable at start", "push", 2, "cannot write"),
    ("full disk at start", "push", 1, "no space left on device writing"),
    ("full disk while writing", "push", 1, "no space left on device writing"),
]


def _prepare(case: str, db: Path, index: Path, monkeypatch, holders: list) -> None:
    if case == "a plain file":
        db.write_text("not a database\n")
    elif case == "a FIFO":
        os.mkfifo(db)
    elif case == "open elsewhere":
        started, stop = db.with_name("started"), db.with_name("stop")
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db), str(started), str(stop)])
        holders.append((holder, stop))
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, "the holder never opened the database"
            time.sleep(0.05)
    elif case == "unwritable at start":
        monkeypatch.setattr(milvus_lite.db.os, "makedirs", _raise_for_db(errno.EACCES))
    elif case == "full disk at start":
        monkeypatch.setattr(milvus_lite.db.os, "makedirs", _raise_for_db(errno.ENOSPC))
    elif case == "full disk while writing":
        from milvus_lite.storage.wal import WAL

        monkeypatch.setattr(WAL, "write_insert", _full_wal)


@pytest.mark.parametrize(("case", "command", "code", "words"), CASES)
def test_a_bad_milvus_lite_target_is_one_line_saying_what_happened(
    case, command, code, words, index, tmp_path, monkeypatch, root_records
):
    db = tmp_path / "t.db"
    holders: list = []
    _prepare(case, db, index, monkeypatch, holders)
    existed = os.path.lexists(db)
    args = ["push", str(index), str(db)] if command == "push" else ["search", str(db), "wing flow"]
    try:
        result = CliRunner().invoke(app, args)
    finally:
        for process, stop in holders:
            stop.touch()
            process.communicate(timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == code, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert "is the server up" not in lines[0] and "Open local milvus failed" not in lines[0]
    if command == "search":
        assert os.path.lexists(db) == existed  # a reader never creates a database
    # what reaches the root logger at WARNING is printed on stderr by a CLI process
    assert [r.getMessage() for r in root_records if r.levelno >= logging.WARNING] == []
