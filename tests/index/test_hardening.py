"""Index folders under concurrency, kills and damage: locks, versioned commits, checksums, metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, write_jsonl

from embedkit.errors import InputError
from embedkit.index import INDEX_FILE, META_FILE, SearchIndex
from embedkit.index.folder import index_files_dir
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage.checksums import STAMP, write_checksums
from embedkit.storage.versioned import CHECKSUMS, MARKER

WORKER = Path(__file__).with_name("writer_worker.py")
DIM = 32


def run_worker(job: dict, *, env: dict | None = None, wait: bool = True) -> subprocess.Popen | int:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(job)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if not wait:
        return process
    process.communicate(timeout=300)
    return process.returncode


def base_index(tmp_path: Path, tiny_bert: Path, n: int = 100) -> Path:
    out = tmp_path / "idx"
    job = {"op": "build", "model": str(tiny_bert), "out": str(out), "prefix": "a", "n": n, "seed": 0}
    assert run_worker(job) == 0
    return out


def ids_in(path: Path) -> set[str]:
    with SearchIndex.load(path) as index:
        rows = list(range(len(index.rows)))
        return set(index.store.docs.ids_of_rows(rows).values())


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the writer never started"
        time.sleep(0.02)


# --- 1. concurrent writers -----------------------------------------------------------------------


def test_second_concurrent_append_fails_fast_and_nothing_is_lost(tmp_path, tiny_bert):
    out = base_index(tmp_path, tiny_bert)
    started = tmp_path / "first-started"
    first = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 100, "seed": 1,
             "sleep": 2.0, "started": str(started)}
    process = run_worker(first, wait=False)
    wait_for(started, process)
    second = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "c", "n": 100, "seed": 2}
    other = run_worker(second, wait=False)
    _, err = other.communicate(timeout=120)
    assert other.returncode == 2
    assert "is being written by process" in err and "wait_for_locks()" in err and "--wait" not in err
    process.communicate(timeout=120)
    assert process.returncode == 0
    expected = {f"a{i}" for i in range(100)} | {f"b{i}" for i in range(100)}
    assert ids_in(out) == expected


def test_concurrent_append_with_wait_keeps_both(tmp_path, tiny_bert):
    out = base_index(tmp_path, tiny_bert)
    started = tmp_path / "first-started"
    first = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 100, "seed": 1,
             "sleep": 8.0, "started": str(started)}
    process = run_worker(first, wait=False)
    wait_for(started, process)
    second = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "c", "n": 100, "seed": 2,
              "wait": True}
    assert run_worker(second) == 0
    assert process.poll() is not None  # the second finished only after the first
    process.communicate(timeout=120)
    assert process.returncode == 0
    expected = {f"{p}{i}" for p in "abc" for i in range(100)}
    assert ids_in(out) == expected and len(expected) == 300


def test_a_lock_left_by_a_killed_writer_is_stale(tmp_path, tiny_bert):
    out = base_index(tmp_path, tiny_bert)
    started = tmp_path / "started"
    job = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 10, "seed": 1,
           "sleep": 60.0, "started": str(started)}
    process = run_worker(job, wait=False)
    wait_for(started, process)
    lock = out.parent / f".{out.name}.lock"
    assert lock.read_text().strip() == str(process.pid)
    process.kill()
    process.communicate()
    assert lock.exists()  # left behind by the killed writer, with its dead pid
    job = {**job, "prefix": "c", "sleep": 0.0, "started": None}
    assert run_worker(job) == 0
    assert ids_in(out) == {f"a{i}" for i in range(100)} | {f"c{i}" for i in range(10)}


# --- 2. a kill between the steps of a replacement ------------------------------------------------


@pytest.mark.parametrize(
    ("step", "new_is_live"),
    [("version-staged", False), ("version-renamed", False), ("version-switched", True)],
)
def test_kill_between_the_steps_of_an_append(tmp_path, tiny_bert, step, new_is_live):
    out = base_index(tmp_path, tiny_bert, n=50)
    job = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 20, "seed": 1}
    assert run_worker(job, env={"EMBEDKIT_FAULT_AT": step}) == -9  # SIGKILL, no cleanup ran
    old = {f"a{i}" for i in range(50)}
    new = old | {f"b{i}" for i in range(20)}
    assert ids_in(out) == (new if new_is_live else old)  # a consistent index, old or new
    # the next successful write on the same index removes what the killed run left
    job = {**job, "prefix": "c", "n": 5}
    assert run_worker(job) == 0
    assert ids_in(out) == (new if new_is_live else old) | {f"c{i}" for i in range(5)}
    names = sorted(p.name for p in out.iterdir())
    assert not [n for n in names if n.startswith(".") and n != MARKER], names
    assert len([n for n in names if n.startswith("v-")]) <= 2  # the live version and the previous one


def test_clean_command_removes_leftovers_of_a_killed_build(tmp_path, tiny_bert):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    out = base_index(tmp_path, tiny_bert, n=10)
    job = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 5, "seed": 1}
    assert run_worker(job, env={"EMBEDKIT_FAULT_AT": "version-staged"}) == -9
    assert [p for p in out.iterdir() if p.name.startswith(".staging-")]
    result = CliRunner().invoke(app, ["clean", str(out)])
    assert result.exit_code == 0, result.output
    assert "removed" in result.stdout
    assert not [p for p in out.iterdir() if p.name.startswith(".staging-")]
    assert ids_in(out) == {f"a{i}" for i in range(10)}


def test_an_old_flat_index_still_opens_and_appends(tmp_path, tiny_bert):
    """An index written before versions: its files directly in the folder, no checksums."""
    out = base_index(tmp_path, tiny_bert, n=30)
    version = index_files_dir(out)
    for path in version.iterdir():
        if path.name not in (CHECKSUMS, STAMP):  # an index from before checksums has neither
            path.rename(out / path.name)
    (version / CHECKSUMS).unlink()
    (version / STAMP).unlink()
    version.rmdir()
    (out / "CURRENT").unlink()
    meta = json.loads((out / META_FILE).read_text())
    del meta["corpus_fingerprint"]
    (out / META_FILE).write_text(json.dumps(meta))
    assert ids_in(out) == {f"a{i}" for i in range(30)}
    job = {"op": "append", "model": str(tiny_bert), "out": str(out), "prefix": "b", "n": 5, "seed": 1}
    assert run_worker(job) == 0
    assert ids_in(out) == {f"a{i}" for i in range(30)} | {f"b{i}" for i in range(5)}
    assert not (out / INDEX_FILE).exists()  # the flat files were replaced by the first version


def test_readers_never_fail_while_another_process_appends(tmp_path, tiny_bert):
    out = base_index(tmp_path, tiny_bert, n=20)
    stop = tmp_path / "stop"
    job = {"op": "append-loop", "model": str(tiny_bert), "out": str(out), "prefix": "r", "n": 3,
           "stop": str(stop), "scratch": str(tmp_path)}
    writer = run_worker(job, wait=False)
    loads, errors, counts = 0, [], set()
    query = np.ones(DIM, dtype=np.float32)
    try:
        while loads < 2000 or len(counts) < 3:
            assert writer.poll() is None, writer.communicate()
            try:
                with SearchIndex.load(out) as index:
                    count = len(index.rows)
                    ids = index.store.docs.ids_of_rows(list(range(count)))
                    index.search(query, k=3)
                assert len(ids) == count and (count - 20) % 3 == 0  # whole appends only
                counts.add(count)
            except InputError as exc:
                errors.append(str(exc))
            loads += 1
            assert loads < 20000, "the writer made no progress"
    finally:
        stop.touch()
        out_text, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert errors == []
    assert int(out_text) >= 2 and len(counts) >= 3  # the loads really overlapped several commits


# --- 5. damage -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [INDEX_FILE, "docs.sqlite", META_FILE])
def test_same_size_corruption_of_each_index_file(tmp_path, tiny_bert, name):
    out = base_index(tmp_path, tiny_bert, n=40)
    with SearchIndex.load(out):  # hashes the files once: the cache must not hide the change
        pass
    path = index_files_dir(out) / name
    size = path.stat().st_size
    path.write_bytes(np.random.default_rng(0).bytes(size))
    with pytest.raises(InputError, match="corrupt file .*does not match the checksum"):
        SearchIndex.load(out)


def test_scores_outside_minus_one_one_are_an_error(tmp_path, tiny_bert):
    import faiss

    out = base_index(tmp_path, tiny_bert, n=10)
    folder = index_files_dir(out)
    index = faiss.read_index(str(folder / INDEX_FILE))
    damaged = faiss.IndexFlatIP(DIM)
    damaged.add(index.reconstruct_n(0, index.ntotal) * 1e6)  # same count and dim, not unit length
    faiss.write_index(damaged, str(folder / INDEX_FILE))
    meta = json.loads((folder / META_FILE).read_text())
    meta["index_bytes"] = (folder / INDEX_FILE).stat().st_size
    (folder / META_FILE).write_text(json.dumps(meta))
    write_checksums(folder)  # the damage recorded as written: only the scores can tell
    with SearchIndex.load(out) as loaded, pytest.raises(InputError, match=r"impossible for unit vectors"):
        loaded.search(np.ones(DIM), k=3)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("count", "many", "'count' must be an integer"),
        ("dim", 0, "'dim' must be an integer >= 1"),
        ("kind", "tree", "'kind' must be one of"),
        ("params", [], "'params' must be an object"),
        ("index_bytes", 1.5, "'index_bytes' must be an integer"),
        ("model_fingerprint", None, "'model_fingerprint' must be a non-empty string"),
    ],
)
def test_malformed_metadata_fields(tmp_path, tiny_bert, field, value, message):
    out = base_index(tmp_path, tiny_bert, n=5)
    folder = index_files_dir(out)
    meta = json.loads((folder / META_FILE).read_text())
    meta[field] = value
    (folder / META_FILE).write_text(json.dumps(meta))
    write_checksums(folder)  # the edit recorded as written, else the checksum catches it first
    with pytest.raises(InputError, match=message):
        SearchIndex.load(out)


def test_wrong_dim_in_model_metadata(tmp_path, tiny_bert):
    import shutil

    from embedkit.encode.model_folder import read_model_spec

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    (model / "embedkit.json").write_text(json.dumps({"dim": "384"}))
    with pytest.raises(InputError, match="'dim' must be a positive integer"):
        read_model_spec(model)
    (model / "embedkit.json").write_text(json.dumps({"dim": 7}))
    with pytest.raises(InputError, match="says dim 7, but the model gives 32-d vectors"):
        read_model_spec(model)


# --- 6. an index of another corpus ---------------------------------------------------------------


class QuietTableEncoder(TableEncoder):
    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        return super().encode(texts, batch_size, normalize)


def test_retrieval_with_an_index_of_another_corpus_is_refused(tmp_path, tiny_bert):
    from embedkit.evaluation import RetrievalEvaluator

    rng = np.random.default_rng(3)
    table = {}
    folders = {}
    for name, words in (("right", "alpha"), ("wrong", "beta")):
        folder = tmp_path / name
        (folder / "qrels").mkdir(parents=True)
        ids = [f"d{i}" for i in range(8)]  # the same ids: only the texts differ
        texts = [f"{words} text {i}" for i in range(8)]
        write_jsonl(folder / "corpus.jsonl", ids, texts)
        write_jsonl(folder / "queries.jsonl", ["q1"], ["a question"])
        (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\n")
        table.update({t: rng.standard_normal(DIM) for t in texts})
        folders[name] = folder
    table["a question"] = rng.standard_normal(DIM)
    encoder = QuietTableEncoder(tiny_bert, table)
    build_index(folders["wrong"] / "corpus.jsonl", tmp_path / "idx", encoder)
    evaluator = RetrievalEvaluator(folders["right"], index=tmp_path / "idx", mode="dense")
    with pytest.raises(InputError, match="was not built from .*right's corpus"):
        evaluator.evaluate(encoder)
    build_index(folders["right"] / "corpus.jsonl", tmp_path / "idx", encoder, IndexOptions(overwrite=True))
    report = RetrievalEvaluator(folders["right"], index=tmp_path / "idx", mode="dense").evaluate(encoder)
    exact = RetrievalEvaluator(folders["right"], mode="dense").evaluate(encoder)
    assert report.metrics == pytest.approx(exact.metrics)


def test_clean_acts_only_on_folders_that_carry_embedkits_marker(tmp_path, tiny_bert):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    foreign = tmp_path / "photos"
    for name in ("v-000001", "v-000002", ".staging-backup"):
        (foreign / name).mkdir(parents=True)
        (foreign / name / "keep.txt").write_text("mine")
    result = CliRunner().invoke(app, ["clean", str(foreign)])
    assert result.exit_code == 0 and "nothing to clean" in result.stdout, result.output
    assert sorted(p.name for p in foreign.iterdir()) == [".staging-backup", "v-000001", "v-000002"]

    out = tmp_path / "idx"  # a first build killed before its version was published
    job = {"op": "build", "model": str(tiny_bert), "out": str(out), "prefix": "a", "n": 5, "seed": 0}
    assert run_worker(job, env={"EMBEDKIT_FAULT_AT": "version-staged"}) == -9
    assert [p for p in out.iterdir() if p.name.startswith(".staging-")]
    result = CliRunner().invoke(app, ["clean", str(out)])
    assert result.exit_code == 0 and "removed" in result.stdout, result.output
    assert not [p for p in out.iterdir() if p.name.startswith(".staging-")]
    assert run_worker(job) == 0  # the folder still counts as empty for a new build
    assert ids_in(out) == {f"a{i}" for i in range(5)}
