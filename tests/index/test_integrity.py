"""Checksums on open at a bounded cost, and `embedkit verify` in full: damage that keeps the metadata."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, write_jsonl
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.index import INDEX_FILE, SearchIndex
from embedkit.index.folder import DOCS_FILE, index_files_dir
from embedkit.index.integrity import verify_index
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage import checksums
from embedkit.storage.checksums import ChecksumMismatch

DIM = 32


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBEDKIT_CACHE_DIR", raising=False)  # it would come before XDG_CACHE_HOME
    monkeypatch.setattr(checksums, "_cache", {})


def test_the_hash_cache_is_kept_in_the_user_cache_in_small_folders(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(tmp_path / "ek-cache"))
    data = tmp_path / "data.bin"
    data.write_bytes(b"wing" * 1000)
    assert checksums.cached_sha256(data) == hashlib.sha256(b"wing" * 1000).hexdigest()
    (entry,) = (tmp_path / "ek-cache" / "checksums").rglob("*.json")
    name = hashlib.sha1(str(data.resolve()).encode()).hexdigest()
    assert entry.relative_to(tmp_path / "ek-cache" / "checksums").parts == (name[:2], f"{name}.json")
    monkeypatch.setattr(checksums, "_cache", {})
    stale_cache(data, "f" * 64)  # read back from the file, not computed again
    monkeypatch.setattr(checksums, "_cache", {})
    assert checksums.cached_sha256(data) == "f" * 64


def test_the_flat_cache_of_before_is_deleted_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(tmp_path / "ek-cache"))
    monkeypatch.setattr(checksums, "_retired", set())
    folder = tmp_path / "ek-cache" / "checksums"
    folder.mkdir(parents=True)
    old = [folder / f"{hashlib.sha1(str(i).encode()).hexdigest()}.json" for i in range(3)]
    for path in old:
        path.write_text('{"key": [], "sha256": "0"}')
    (folder / "notes.json").write_text("{}")  # not an entry's name: kept
    data = tmp_path / "data.bin"
    data.write_bytes(b"flow")
    checksums.cached_sha256(data)
    assert not any(path.exists() for path in old) and (folder / "notes.json").exists()
    assert (folder / ".subfolders").exists() and len(list(folder.rglob("*/*.json"))) == 1
    (folder / old[0].name).write_text("{}")  # once: a marked folder is not scanned again
    monkeypatch.setattr(checksums, "_retired", set())
    monkeypatch.setattr(checksums, "_cache", {})
    other = tmp_path / "other.bin"
    other.write_bytes(b"wing")
    checksums.cached_sha256(other)
    assert (folder / old[0].name).exists()


def test_a_write_sweeps_only_its_own_dead_leftovers(tmp_path) -> None:
    from embedkit.storage import atomic

    dead = 2**22 + 12345  # above the largest pid Linux allows (2**22): no such process
    target = tmp_path / "meta.json"
    leftovers = {
        f".meta.json.{dead}.abc.tmp": False,  # a killed writer's: removed
        f".meta.json.{os.getpid()}.abc.tmp": True,  # a live writer's: kept
        f".other.json.{dead}.abc.tmp": True,  # another target's: not this write's business
        "meta.json.bak": True,
    }
    for name in leftovers:
        (tmp_path / name).write_text("x")
    atomic.write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    kept = {name for name, stays in leftovers.items() if stays}
    assert {p.name for p in tmp_path.iterdir()} == {"meta.json", *kept}


def small_index(tmp_path: Path, tiny_bert: Path, n: int = 60) -> Path:
    vectors = np.random.default_rng(0).standard_normal((n, DIM))
    ids = [f"d{i}" for i in range(n)]
    texts = [f"text of {i} about wings and flow {i * 7}" for i in ids]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ids, texts)
    out = tmp_path / "idx"
    build_index(
        corpus,
        out,
        TableEncoder(tiny_bert, dict(zip(texts, vectors, strict=True))),
        IndexOptions(kind="flat"),
    )
    return out


def rot(path: Path, offset: int) -> None:
    """Flip one byte at `offset`, then put the mtime back, as bit rot or a restored copy would leave it."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def stale_cache(path: Path, sha: str) -> None:
    """Make the hash cache claim the damaged file still has `sha`: the metadata says nothing changed."""
    checksums._remember(checksums._key(path), sha)


def test_same_size_edit_with_the_mtime_restored_is_not_served(tmp_path, tiny_bert):
    out = small_index(tmp_path, tiny_bert)
    with SearchIndex.load(out):  # hashes and caches every file
        pass
    docs = index_files_dir(out) / DOCS_FILE
    rot(docs, docs.stat().st_size // 2)
    with pytest.raises(InputError, match=f"corrupt file {docs}"):
        SearchIndex.load(out)


def test_bit_rot_that_keeps_every_stat_field_is_caught_in_a_small_file(tmp_path, tiny_bert):
    out = small_index(tmp_path, tiny_bert)
    docs = index_files_dir(out) / DOCS_FILE
    before = checksums.read_checksums(docs.parent)[DOCS_FILE].sha256
    rot(docs, docs.stat().st_size // 2)
    stale_cache(docs, before)
    with pytest.raises(ChecksumMismatch, match=f"corrupt file {docs}"):
        SearchIndex.load(out)  # small files are hashed in full on every open, whatever the cache says


def test_a_large_file_is_sampled_on_open_and_read_in_full_by_verify(tmp_path, tiny_bert, monkeypatch):
    monkeypatch.setattr(checksums, "MIN_BLOCK", 1024)  # index.faiss (~7.7 KB) spans several blocks
    out = small_index(tmp_path, tiny_bert)
    monkeypatch.setattr(checksums, "OPEN_FULL_BYTES", 0)  # every file is "large" on open
    path = index_files_dir(out) / INDEX_FILE
    entry = checksums.read_checksums(path.parent)[INDEX_FILE]
    assert len(entry.blocks) == -(-entry.size // 1024) >= 4

    rot(path, entry.size - 1)  # the last block is sampled on every open
    stale_cache(path, entry.sha256)
    last = rf"\(bytes {(len(entry.blocks) - 1) * 1024}-{entry.size - 1}\)"
    with pytest.raises(ChecksumMismatch, match=rf"corrupt file .*{INDEX_FILE} {last}"):
        SearchIndex.load(out)
    rot(path, entry.size - 1)  # repaired

    monkeypatch.setattr(checksums, "SAMPLED_BLOCKS", 0)  # only the first and last blocks are read
    rot(path, 1024 + 5)  # the second block: beyond what this open samples
    stale_cache(path, entry.sha256)
    with SearchIndex.load(out):  # the documented bound of the check on open
        pass
    with pytest.raises(ChecksumMismatch, match=rf"corrupt file .*{INDEX_FILE} \(bytes 1024-2047\)"):
        verify_index(out)


def test_verify_command(tmp_path, tiny_bert):
    runner = CliRunner()
    out = small_index(tmp_path, tiny_bert)
    done = runner.invoke(app, ["verify", str(out)])
    listed = len(checksums.read_checksums(index_files_dir(out)))
    assert done.exit_code == 0, done.output
    assert f"{listed} files" in done.stdout and "all match their checksums" in done.stdout

    docs = index_files_dir(out) / DOCS_FILE
    before = checksums.read_checksums(docs.parent)[DOCS_FILE].sha256
    rot(docs, 100)
    stale_cache(docs, before)
    done = runner.invoke(app, ["verify", str(out)])
    assert done.exit_code == 1
    assert done.stderr.startswith(f"error: corrupt file {docs}") and len(done.stderr.splitlines()) == 1

    (docs.parent / checksums.CHECKSUMS).unlink()  # a version written with checksums lost them: damaged
    done = runner.invoke(app, ["verify", str(out)])
    assert done.exit_code == 1 and "checksums.json is missing" in done.stderr and "damaged" in done.stderr
    done = runner.invoke(app, ["verify", str(tmp_path)])
    assert done.exit_code == 2 and done.stderr == f"error: not an embedkit index: {tmp_path}\n"


def test_files_in_subfolders_are_listed_and_checked(tmp_path):
    folder = tmp_path / "v"
    (folder / "lexical").mkdir(parents=True)
    (folder / "lexical" / "segment.idx").write_bytes(b"postings" * 100)
    (folder / "lexical" / ".tantivy-meta.lock").write_bytes(b"")
    (folder / "lexical" / ".managed.json").write_text("[]")
    (folder / "a.bin").write_bytes(b"a")
    (folder / ".a.bin.123.x.tmp").write_bytes(b"")
    assert set(checksums.write_checksums(folder)) == {
        "a.bin",
        "lexical/segment.idx",
        "lexical/.managed.json",
        checksums.STAMP,
    }
    checksums.verify_checksums(folder)
    rot(folder / "lexical" / "segment.idx", 3)
    with pytest.raises(ChecksumMismatch, match="segment.idx"):
        checksums.verify_checksums(folder)
