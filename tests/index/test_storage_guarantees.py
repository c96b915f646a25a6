"""What `clean` may delete and what a missing `checksums.json` means (docs/guarantees.md).

Each variant damages a versioned folder in one way; the table states, by hand, which entries must
still be there afterwards and whether `clean` must refuse. The folders are written by
`new_version` itself, so they are embedkit's own in every respect the variant does not change.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, write_jsonl
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage.checksums import CHECKSUMS, STAMP, ChecksumMismatch, read_checksums
from embedkit.storage.versioned import MARKER, POINTER, clean, new_version

runner = CliRunner()


def versioned(root: Path, count: int = 4) -> Path:
    """`count` versions written one after the other; `new_version` keeps the last two."""
    for number in range(1, count + 1):
        with new_version(root) as stage:
            (stage / "data.txt").write_text(f"version {number}\n")
    return root


def entries(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if not p.name.startswith(".")}


def _no_pointer(root: Path) -> None:
    (root / POINTER).unlink()


def _pointer_to_missing(root: Path) -> None:
    (root / POINTER).write_text("v-000009\n")


def _pointer_to_garbage(root: Path) -> None:
    (root / POINTER).write_text("../../etc\n")


def _pointer_empty(root: Path) -> None:
    (root / POINTER).write_text("")


def _pointer_is_a_folder(root: Path) -> None:
    (root / POINTER).unlink()
    (root / POINTER).mkdir()


def _no_marker(root: Path) -> None:
    (root / MARKER).unlink()


def _old_version_is_a_symlink(root: Path) -> None:
    elsewhere = root.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not embedkit's\n")
    shutil.rmtree(root / "v-000001")
    os.symlink(elsewhere, root / "v-000001")


def _staging_is_a_symlink(root: Path) -> None:
    elsewhere = root.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not embedkit's\n")
    os.symlink(elsewhere, root / ".staging-1-abc")


def _look_alike_version(root: Path) -> None:
    (root / "v-000002").mkdir()  # not written by embedkit: no checksums.json
    (root / "v-000002" / "data.txt").write_text("someone's\n")


def _version_named_file(root: Path) -> None:
    (root / "v-000002").write_text("a file, not a version\n")


# (name, damage, refused?, entries that must remain)
DAMAGE: list[tuple[str, Callable[[Path], None], bool, set[str]]] = [
    ("pointer missing", _no_pointer, True, {"v-000001", "v-000003", "v-000004"}),
    ("pointer names a missing version", _pointer_to_missing, True, {"v-000001", "v-000003", "v-000004"}),
    ("pointer names no version", _pointer_to_garbage, True, {"v-000001", "v-000003", "v-000004"}),
    ("pointer empty", _pointer_empty, True, {"v-000001", "v-000003", "v-000004"}),
    ("pointer is a folder", _pointer_is_a_folder, True, {"v-000001", "v-000003", "v-000004"}),
    ("no marker", _no_marker, False, {"v-000001", "v-000003", "v-000004"}),
    ("an old version is a symlink", _old_version_is_a_symlink, False, {"v-000001", "v-000003", "v-000004"}),
    ("a staging folder is a symlink", _staging_is_a_symlink, False, {"v-000003", "v-000004"}),
    ("a look-alike version folder", _look_alike_version, False, {"v-000002", "v-000003", "v-000004"}),
    ("a file named as a version", _version_named_file, False, {"v-000002", "v-000003", "v-000004"}),
]


@pytest.mark.parametrize(("name", "damage", "refused", "kept"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_clean_deletes_only_what_it_can_prove_is_its_own(
    tmp_path: Path, name: str, damage: Callable[[Path], None], refused: bool, kept: set[str]
) -> None:
    root = versioned(tmp_path / "root")
    shutil.copytree(root / "v-000003", root / "v-000001")  # an old version the last write left behind
    damage(root)
    before = {p.name for p in root.iterdir()}
    result = runner.invoke(app, ["clean", str(root)])
    after = {p.name for p in root.iterdir()}
    assert kept <= after, result.output
    if refused:
        assert result.exit_code == 2, result.output
        assert after == before  # nothing at all removed
        assert f"`embedkit verify {root}` names the repair" in result.output
        assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result.output
        removed = {
            line.removeprefix("removed ") for line in result.stdout.splitlines() if line.startswith("removed")
        }
        assert {Path(p).name for p in removed} == before - after  # reports exactly what is gone
    assert not (tmp_path / "elsewhere").exists() or (tmp_path / "elsewhere" / "keep.txt").is_file()


def test_clean_of_an_intact_folder_removes_the_old_version_only(tmp_path: Path) -> None:
    root = versioned(tmp_path / "root")
    shutil.copytree(root / "v-000003", root / "v-000001")
    result = runner.invoke(app, ["clean", str(root)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"removed {root / 'v-000001'}\n"
    assert entries(root) == {POINTER, "v-000003", "v-000004"}


@pytest.mark.parametrize("target", ["missing", "missing/deeper", "missing.npy"])
def test_clean_of_a_missing_target_is_an_error(tmp_path: Path, target: str) -> None:
    result = runner.invoke(app, ["clean", str(tmp_path / target)])
    assert result.exit_code == 2
    assert (
        result.output == f"error: {tmp_path / target} does not exist: nothing of embedkit's there to clean\n"
    )
    assert list(tmp_path.iterdir()) == []  # not even a lock file


def test_clean_functions_refuse_a_damaged_pointer(tmp_path: Path) -> None:
    root = versioned(tmp_path / "root")
    _pointer_to_missing(root)
    with pytest.raises(InputError, match="names v-000009, which is missing: nothing removed"):
        clean(root)
    assert entries(root) == {POINTER, "v-000003", "v-000004"}


# ----- missing checksums ----------------------------------------------------------------------


def test_a_version_that_lost_its_checksums_is_damaged(tmp_path: Path) -> None:
    root = versioned(tmp_path / "root", count=1)
    version = root / "v-000001"
    assert read_checksums(version) is not None and (version / STAMP).is_file()
    (version / CHECKSUMS).unlink()
    with pytest.raises(ChecksumMismatch, match="checksums.json is missing: .* lost them, so it is damaged"):
        read_checksums(version)
    (version / STAMP).unlink()  # a version without the stamp (written before it) is still a version
    with pytest.raises(ChecksumMismatch, match="lost them"):
        read_checksums(version)
    flat = tmp_path / "copy"
    shutil.copytree(version, flat)  # copied out of its index: the stamp is gone too, nothing tells
    assert read_checksums(flat) is None


def test_a_copied_out_version_keeps_its_stamp(tmp_path: Path) -> None:
    root = versioned(tmp_path / "root", count=1)
    flat = tmp_path / "copy"
    shutil.copytree(root / "v-000001", flat)
    (flat / CHECKSUMS).unlink()
    with pytest.raises(ChecksumMismatch, match="lost them"):
        read_checksums(flat)


def _index(tmp_path: Path, tiny_bert: Path) -> Path:
    vectors = np.random.default_rng(0).standard_normal((12, 32))
    texts = [f"text {i} about wings" for i in range(12)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [f"d{i}" for i in range(12)], texts)
    out = tmp_path / "idx"
    build_index(
        corpus,
        out,
        TableEncoder(tiny_bert, dict(zip(texts, vectors, strict=True))),
        IndexOptions(kind="flat"),
    )
    return out


def test_search_verify_and_repair_of_a_real_index(tmp_path: Path, tiny_bert: Path) -> None:
    out = _index(tmp_path, tiny_bert)
    version = out / (out / POINTER).read_text().strip()
    (version / CHECKSUMS).unlink()
    with pytest.raises(ChecksumMismatch, match="lost them"):
        SearchIndex.load(out)
    done = runner.invoke(app, ["verify", str(out)])
    assert done.exit_code == 1 and "checksums.json is missing" in done.output

    (tmp_path / "b").mkdir()
    out2 = _index(tmp_path / "b", tiny_bert)
    live = (out2 / POINTER).read_text().strip()
    (out2 / POINTER).unlink()
    done = runner.invoke(app, ["verify", str(out2)])
    assert done.exit_code == 1, done.output
    assert (
        f"the newest intact version is {live}: restore the pointer with `echo {live} > {out2 / POINTER}`"
        in (done.output)
    )
    (out2 / POINTER).write_text(live + "\n")  # the repair verify named
    assert runner.invoke(app, ["verify", str(out2)]).exit_code == 0


def test_a_file_left_out_of_checksums_json_is_damage(tmp_path: Path, tiny_bert: Path) -> None:
    import json

    out = _index(tmp_path, tiny_bert)
    version = out / (out / POINTER).read_text().strip()
    listed = json.loads((version / CHECKSUMS).read_text())
    del listed["files"]["docs.sqlite"]  # its check turned off by hand, then the file edited
    (version / CHECKSUMS).write_text(json.dumps(listed))
    with pytest.raises(ChecksumMismatch, match="docs.sqlite is not listed in .*checksums.json"):
        SearchIndex.load(out)
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 1


def test_a_milvus_lite_file_inside_an_index_is_refused(tmp_path: Path, tiny_bert: Path) -> None:
    pytest.importorskip("pymilvus")
    out = _index(tmp_path, tiny_bert)
    version = out / (out / POINTER).read_text().strip()
    result = runner.invoke(app, ["push", str(out), str(version / "m.db")])
    assert result.exit_code == 2 and "an index deletes what lives in it" in result.output
    assert not (version / "m.db").exists()
