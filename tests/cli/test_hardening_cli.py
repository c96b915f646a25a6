"""Outputs that clobber inputs, unwritable outputs, silent wrong results, killed runs, file modes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.storage import atomic

CORPUS = "\n".join(" ".join(["wing flow"] * n) + f" {n}" for n in range(1, 13)) + "\n"
STS = "sentence1\tsentence2\tscore\na cat\ta dog\t1.0\nwings\tflow\t3.5\nsun\tmoon\t2.0\n"


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def exit2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no box, no traceback


# --- 3. an output that is an input ---------------------------------------------------------------


def test_outputs_equal_to_inputs_are_refused_before_any_work(runner, tmp_path, tiny_bert):
    sts = tmp_path / "sts.tsv"
    sts.write_text(STS)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    link = tmp_path / "link.json"
    link.symlink_to(sts)
    model = ["--model", str(tiny_bert)]
    exit2(runner, ["eval", "sts", str(sts), "--json", str(sts), *model], "would overwrite the input")
    exit2(runner, ["eval", "sts", str(sts), "--json", str(link), *model], "would overwrite the input")
    exit2(runner, ["eval", "pseudo", str(corpus), "--json", str(corpus), *model], "would overwrite the input")
    (tmp_path / "c.npy").write_text("x")
    exit2(
        runner,
        ["embed", str(tmp_path / "c.npy"), "--out", str(tmp_path / "c.npy"), *model],
        "would overwrite the input",
    )
    work = tmp_path / "work"
    work.mkdir()
    inside = work / "corpus.txt"
    inside.write_text(CORPUS)
    exit2(
        runner,
        ["train", str(inside), "--out", str(work), "--base", str(tiny_bert), "--overwrite"],
        "would overwrite the input",
    )
    exit2(runner, ["export", str(tiny_bert), "--out", str(tiny_bert)], "would overwrite the input")
    assert sts.read_text() == STS and corpus.read_text() == CORPUS and inside.read_text() == CORPUS


# --- 4. unwritable outputs, checked as a user that is not root ----------------------------------


def _as_nobody(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run `embedkit ARGS` as user nobody (needs root to switch), else as this non-root user."""
    code = "import sys; from embedkit.cli.app import main; sys.argv[0] = 'embedkit'; main()"
    command = [sys.executable, "-c", code, *args]
    env = {**os.environ, "HOME": str(cwd), "XDG_CACHE_HOME": str(cwd / "cache")}
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot test as another user")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.fixture
def shared_dir():
    """A folder that user nobody can read (pytest's own tmp folders are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="embedkit-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_unwritable_outputs_fail_up_front_as_a_normal_user(shared_dir, tiny_bert):
    corpus = shared_dir / "corpus.txt"
    corpus.write_text(CORPUS)
    corpus.chmod(0o644)
    sts = shared_dir / "sts.tsv"
    sts.write_text(STS)
    sts.chmod(0o644)
    locked = shared_dir / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    (shared_dir / "cache").mkdir(mode=0o777)
    (shared_dir / "cache").chmod(0o777)
    probe = _as_nobody(["--help"], shared_dir)
    if probe.returncode != 0:
        pytest.skip(f"cannot run embedkit as another user here: {probe.stderr.strip()[-200:]}")
    model = ["--model", "no-such-model"]  # the output check comes first: no model is ever needed
    cases = [
        ["embed", str(corpus), "--out", str(locked / "v.npy"), *model],
        ["index", str(corpus), "--out", str(locked / "idx"), *model],
        ["eval", "sts", str(sts), "--json", str(locked / "r.json"), *model],
        ["eval", "pseudo", str(corpus), "--json", str(locked / "r.json"), *model],
    ]
    for args in cases:
        done = _as_nobody(args, shared_dir)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
        assert done.stderr.startswith("error: cannot write") and "no write permission" in done.stderr
    assert list(locked.iterdir()) == []


def test_no_onnxruntime_telemetry_notice_for_a_normal_user(shared_dir):
    code = "from embedkit.encode.ort_import import import_onnxruntime; print(import_onnxruntime().__name__)"
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=shared_dir,
        timeout=120,
        env={**os.environ, "HOME": str(shared_dir)},
    )
    if done.returncode != 0:
        pytest.skip(f"cannot run python as another user here: {done.stderr[-200:]}")
    assert done.stdout.strip() == "onnxruntime"
    assert "telemetry" not in done.stderr and done.stderr == ""


# --- 6. silently wrong results -------------------------------------------------------------------


def test_constant_sts_scores_are_refused_and_json_never_holds_nan(runner, tmp_path, tiny_bert):
    flat = tmp_path / "flat.tsv"
    flat.write_text("sentence1\tsentence2\tscore\na\tb\t3\nc\td\t3\ne\tf\t3\n")
    exit2(runner, ["eval", "sts", str(flat), "--model", str(tiny_bert)], "every gold score is 3")
    out = tmp_path / "nan.json"
    atomic.write_json_atomic(out, {"a": float("nan"), "b": [1.0, float("inf")], "c": np.float32("nan")})
    assert json.loads(out.read_text()) == {"a": None, "b": [1.0, None], "c": None}
    assert "NaN" not in out.read_text()


def test_qrels_of_unknown_documents_only_are_refused(tmp_path):
    from embedkit.data.beir import read_beir

    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": "y"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tz9\t1\n")
    with pytest.raises(InputError, match="judges only documents that the corpus lacks"):
        read_beir(tmp_path, "test")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tz9\t1\nq1\td1\t1\n")
    with pytest.warns(UserWarning, match="judges 1 of 2 documents"):
        read_beir(tmp_path, "test")


def test_an_unterminated_quote_is_refused_with_its_line(runner, tmp_path, tiny_bert):
    bad = tmp_path / "docs.csv"
    bad.write_text('id,text\n1,first\n2,"second never closed\n3,third\n4,fourth\n')
    exit2(
        runner,
        ["embed", str(bad), "--out", str(tmp_path / "v.npy"), "--model", str(tiny_bert)],
        "line 3: a quoted field is never closed",
    )
    good = tmp_path / "good.csv"
    good.write_text('id,text\n1,"a ""quoted"" word"\n2,"two\nlines"\n')
    from embedkit.data.corpus import read_documents

    assert [d.text for d in read_documents(good)] == ['a "quoted" word', "two\nlines"]


# --- 8. usage errors -----------------------------------------------------------------------------


def test_usage_errors_are_one_line_exit_2(runner, tmp_path):
    exit2(runner, ["search", str(tmp_path), "query", "-k", "0"], "Invalid value for '-k'")
    exit2(runner, ["index", str(tmp_path / "c.txt")], "Missing option '--out'")
    exit2(runner, ["no-such-command"], "No such command")


# --- 2 and 8. atomic replacement: kills, leftovers, modes ---------------------------------------


def _kill_in_subprocess(code: str, step: str, cwd: Path) -> None:
    env = {**os.environ, atomic.FAULT_ENV: step}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr


def test_folder_replacement_killed_between_its_two_renames_is_repaired(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights").write_text("old")
    # where RENAME_EXCHANGE is missing, the old folder is renamed aside first; kill right then
    code = (
        "from pathlib import Path; from embedkit.storage import atomic\n"
        "atomic.exchange = lambda a, b: False\n"
        f"with atomic.atomic_dir(Path({str(target)!r})) as tmp:\n"
        "    (tmp / 'weights').write_text('new')\n"
    )
    _kill_in_subprocess(code, "dir-aside", tmp_path)
    assert not target.exists()  # the instant the fallback cannot avoid ...
    atomic.sweep_leftovers(target)  # ... which the next write to the target repairs first
    assert (target / "weights").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    # with the exchange, a kill right after the swap leaves the new folder, and only garbage
    code = code.replace("atomic.exchange = lambda a, b: False\n", "")
    _kill_in_subprocess(code, "dir-swapped", tmp_path)
    assert (target / "weights").read_text() == "new"
    with atomic.atomic_dir(target) as tmp:
        (tmp / "weights").write_text("newer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the killed run's copy is gone


def test_embedding_killed_between_its_renames_is_completed(tmp_path):
    npy, ids = tmp_path / "v.npy", tmp_path / "v.ids.txt"
    np.save(npy, np.zeros((2, 3), np.float32))
    ids.write_text("a\nb\n")
    code = (
        "import numpy as np; from pathlib import Path; from embedkit.storage import atomic\n"
        f"with atomic.atomic_files(Path({str(npy)!r}), Path({str(ids)!r})) as (n, i):\n"
        "    np.save(open(n, 'wb'), np.ones((3, 3), np.float32)); i.write_text('x\\ny\\nz\\n')\n"
    )
    _kill_in_subprocess(code, "files-moved-1", tmp_path)
    from embedkit.storage.cleanup import clean_target

    removed, completed = clean_target(npy)
    assert completed
    assert np.load(npy).shape == (3, 3) and ids.read_text() == "x\ny\nz\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.ids.txt", "v.npy"]
    _kill_in_subprocess(code, "files-journaled", tmp_path)  # committed, nothing moved yet
    atomic.recover_files(npy)
    assert np.load(npy).shape == (3, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.ids.txt", "v.npy"]


def test_published_files_follow_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        with atomic.atomic_dir(tmp_path / "model") as tmp:
            fd = os.open(tmp / "model.safetensors", os.O_CREAT | os.O_WRONLY, 0o600)  # as safetensors does
            os.close(fd)
            (tmp / "sub").mkdir(mode=0o700)
            (tmp / "sub" / "x.json").write_text("{}")
            os.chmod(tmp / "sub" / "x.json", 0o600)
        with atomic.atomic_path(tmp_path / "file.json") as tmp:
            tmp.write_text("{}")
    finally:
        os.umask(previous)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "model" / "model.safetensors") == 0o644
    assert mode(tmp_path / "model" / "sub") == 0o755
    assert mode(tmp_path / "model" / "sub" / "x.json") == 0o644
    assert mode(tmp_path / "model") == 0o755
    assert mode(tmp_path / "file.json") == 0o644


# --- 7. a killed train --overwrite ---------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_killed_overwrite_leaves_the_finished_model_as_it_was(tmp_path, tiny_bert, one_thread):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    out = tmp_path / "model"
    args = [
        "train",
        str(corpus),
        "--out",
        str(out),
        "--base",
        str(tiny_bert),
        "--batch-size",
        "4",
        "--seed",
        "7",
        "--set",
        "warmup_ratio=0",
        "--quiet",
    ]
    result = CliRunner().invoke(app, [*args, "--max-steps", "2"])
    assert result.exit_code == 0, result.output
    before = _tree(out)
    code = "import sys; from embedkit.cli.app import main; sys.argv[0] = 'embedkit'; main()"
    longer = [*args, "--max-steps", "400", "--save-steps", "1", "--overwrite"]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *longer],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    run_dir = tmp_path / ".model.overwrite-run"
    deadline = time.monotonic() + 240
    while not list((run_dir / "checkpoints").glob("step-*")) if run_dir.is_dir() else True:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.kill()
    process.communicate()
    assert _tree(out) == before  # metrics, weights, config: all as they were; no checkpoints added
    result = CliRunner().invoke(
        app, ["train", str(corpus), "--out", str(out), "--resume", "--base", str(tiny_bert)]
    )
    assert result.exit_code == 2 and "nothing to resume" in result.stderr  # still a finished model
    result = CliRunner().invoke(app, [*args, "--max-steps", "1", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert not run_dir.exists()  # the killed run's folder went with the next overwrite
    assert _tree(out) != before


def test_a_part_write_killed_between_its_renames_is_completed_by_clean(tmp_path):
    """`embedkit clean PARTS_DIR` rolls a committed part write forward and removes a killed one's temps."""
    parts = tmp_path / "parts"
    parts.mkdir()
    names = [parts / f"part-1-of-2{suffix}" for suffix in (".npy", ".ids.txt", ".json")]
    code = (
        "import numpy as np; from pathlib import Path; from embedkit.storage import atomic\n"
        f"with atomic.atomic_files(*map(Path, {[str(p) for p in names]!r})) as (n, i, j):\n"
        "    np.save(open(n, 'wb'), np.ones((2, 3), np.float32))\n"
        "    i.write_text('a\\nb\\n'); j.write_text('{}')\n"
    )
    _kill_in_subprocess(code, "files-moved-1", tmp_path)  # the .npy is in place, the other two are not
    assert sorted(p.name for p in parts.iterdir() if not p.name.startswith(".")) == ["part-1-of-2.npy"]
    result = CliRunner().invoke(app, ["clean", str(parts)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in parts.iterdir()) == [p.name for p in sorted(names)]
    assert (parts / "part-1-of-2.ids.txt").read_text() == "a\nb\n"
    _kill_in_subprocess(code.replace("part-1-of-2", "part-0-of-2"), "files-moved-1", tmp_path)
    (parts / "part-0-of-2.npy").unlink()
    for journal in parts.glob(".part-0-of-2.npy.commit"):
        journal.unlink()  # as if killed before the commit: only temporaries remain, nothing to finish
    assert any(p.name.startswith(".part-0-of-2.") for p in parts.iterdir())
    assert CliRunner().invoke(app, ["clean", str(parts)]).exit_code == 0
    assert sorted(p.name for p in parts.iterdir()) == [p.name for p in sorted(names)]


# --- usage: a bare group, choices checked before loading -----------------------------------------


@pytest.mark.parametrize(
    ("args", "names"), [([], "embed, train, adapt, export"), (["eval"], "sts, sts-retrieval")]
)
def test_a_group_without_its_command_is_one_usage_line(runner, args, names):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stdout == ""
    assert result.stderr.startswith("error: missing command: embedkit") and names in result.stderr


def test_fusion_and_mode_are_checked_before_the_index_loads(runner, tmp_path, monkeypatch):
    from embedkit.index import SearchIndex

    def never(*args, **kwargs):
        raise AssertionError("the index was loaded before the arguments were checked")

    monkeypatch.setattr(SearchIndex, "load", never)
    index = str(tmp_path / "idx")
    (tmp_path / "idx").mkdir()
    exit2(runner, ["search", index, "wing", "--fusion", "borda"], "unknown fusion method 'borda'")
    exit2(runner, ["search", index, "wing", "--mode", "sparse"], "unknown search mode 'sparse'")
    exit2(
        runner,
        ["eval", "retrieval", str(tmp_path), "--index", index, "--fusion", "borda"],
        "unknown fusion method 'borda'",
    )


def test_lexical_search_for_stopwords_only_finds_nothing_and_says_so(runner, tmp_path, tiny_bert):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("shock waves on a wing\nthe boundary layer of a flat plate\nheat transfer in jets\n")
    out = tmp_path / "idx"
    result = runner.invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["search", str(out), "the of and a", "--mode", "lexical", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"query": "the of and a", "mode": "lexical", "hits": []}
    assert "note: no lexical hits for 'the of and a'" in result.stderr
    result = runner.invoke(app, ["search", str(out), "boundary layer", "--mode", "lexical", "--json"])
    assert [h["id"] for h in json.loads(result.stdout)["hits"]] == ["2"] and "note:" not in result.stderr
