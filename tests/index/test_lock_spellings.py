"""One folder, one write lock, however its path is spelled.

Each spelling of an index folder (direct, through a symlink to it, through a symlink to its
parent, with `..`, relative) takes the lock in a separate process; every other spelling must then
find it busy. The reference is the folder itself: `os.path.samefile` says all spellings are one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embedkit.errors import InputError
from embedkit.storage.locking import write_lock

HOLDER = """
import sys, time
from pathlib import Path
from embedkit.storage.locking import write_lock
target, started, stop = sys.argv[1:]
with write_lock(target):
    Path(started).touch()
    while not Path(stop).exists():
        time.sleep(0.02)
"""
SPELLINGS = ["direct", "symlink", "parent-symlink", "dotdot", "relative"]


def spell(root: Path, how: str) -> tuple[str, Path]:
    """(the path as given, the folder it is given from): every spelling names `root/data/idx`."""
    return {
        "direct": (str(root / "data" / "idx"), root),
        "symlink": (str(root / "link-to-idx"), root),
        "parent-symlink": (str(root / "link-to-data" / "idx"), root),
        "dotdot": (str(root / "data" / "sub" / ".." / "idx"), root),
        "relative": ("idx", root / "data"),
    }[how]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "data" / "idx").mkdir(parents=True)
    (tmp_path / "data" / "sub").mkdir()
    (tmp_path / "link-to-idx").symlink_to(tmp_path / "data" / "idx")
    (tmp_path / "link-to-data").symlink_to(tmp_path / "data")
    for how in SPELLINGS:
        given, cwd = spell(tmp_path, how)
        assert os.path.samefile(cwd / given, tmp_path / "data" / "idx")  # the reference: one folder
    return tmp_path


@pytest.mark.parametrize("holder", SPELLINGS)
def test_every_spelling_of_a_held_folder_is_busy(root: Path, holder: str, monkeypatch) -> None:
    given, cwd = spell(root, holder)
    started, stop = root / "started", root / "stop"
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, given, str(started), str(stop)], cwd=cwd, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.02)
        for contender in SPELLINGS:
            path, where = spell(root, contender)
            monkeypatch.chdir(where)
            busy = f"is being written by process {process.pid}"
            with pytest.raises(InputError, match=busy), write_lock(path):
                pass
    finally:
        stop.touch()
        process.communicate(timeout=60)
    assert process.returncode == 0
    for contender in SPELLINGS:  # free again, whichever way it is spelled
        path, where = spell(root, contender)
        monkeypatch.chdir(where)
        with write_lock(path):
            pass


def test_an_append_through_a_symlink_waits_for_the_direct_one(tmp_path: Path, tiny_bert: Path) -> None:
    """The end-to-end case: two appends at once, one through a symlink; nothing is lost."""
    from test_hardening import base_index, ids_in, run_worker, wait_for

    out = base_index(tmp_path, tiny_bert, n=20)
    link = tmp_path / "link"
    link.symlink_to(out)
    started = tmp_path / "first-started"
    first = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 20, "seed": 1,
             "sleep": 2.0, "started": str(started)}
    process = run_worker(first, wait=False)
    wait_for(started, process)
    second = {"op": "append", "model": str(tiny_bert), "out": str(link), "prefix": "c", "n": 20, "seed": 2}
    other = run_worker(second, wait=False)
    _, err = other.communicate(timeout=120)
    assert other.returncode == 2 and "is being written by process" in err, err
    assert "Traceback" not in err
    process.communicate(timeout=120)
    assert process.returncode == 0
    assert ids_in(out) == {f"a{i}" for i in range(20)} | {f"b{i}" for i in range(20)}
    assert ids_in(link) == ids_in(out)  # one index
