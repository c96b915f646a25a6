"""`push --append` adds rows only to a collection that holds this source's first rows (docs/guarantees.md).

Each case pushes one source, then appends another; the table says, by hand, whether the second
is the same source (a copy, the index grown by appends) or not (another corpus, the same corpus
rebuilt as another index, a first push of another corpus killed half way). A refusal must be one
line, exit 2, and leave the collection's rows and record as they were.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder
from typer.testing import CliRunner

from embedkit import build_index
from embedkit.cli.app import app
from embedkit.errors import RunFailure
from embedkit.jobs.index_options import IndexOptions
from embedkit.remote.base import RemoteTarget
from embedkit.remote.milvus import MilvusCollection
from embedkit.remote.push import push_index

pytest.importorskip("faiss")
pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

DIM = 32


@pytest.fixture(autouse=True)
def same_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every index here is built in the same second, as on a fast machine: `created` (seconds)
    can't tell them apart, so only the index's own identity can."""
    import embedkit.jobs.index_build

    monkeypatch.setattr(embedkit.jobs.index_build, "now", lambda: "2026-01-01T00:00:00+00:00")


def _corpus(path: Path, prefix: str, first: int, count: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(first, first + count):
            f.write(json.dumps({"_id": f"{prefix}{i}", "text": f"{prefix} text number {i}"}) + "\n")
    return path


def _table(tiny_bert: Path) -> TableEncoder:
    rng = np.random.default_rng(0)
    texts = [f"{p} text number {i}" for p in ("a", "b") for i in range(120)]
    return TableEncoder(tiny_bert, {t: rng.standard_normal(DIM) for t in texts})


def _build(
    work: Path, name: str, encoder: TableEncoder, prefix: str, count: int, append: bool = False
) -> Path:
    corpus = _corpus(work / f"{name}-{prefix}{count}.jsonl", prefix, 60 if append else 0, count)
    build_index(corpus, work / name, encoder, IndexOptions(kind="flat", append=append))
    return work / name


def _same_index(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    return first, False


def _copied(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    shutil.copytree(first, work / "copy")
    return work / "copy", False


def _grown(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    _build(work, first.name, encoder, "a", 20, append=True)  # rows 60..79 of the same corpus
    return first, False


def _other_corpus_larger(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    return _build(work, "other", encoder, "b", 80), True


def _other_corpus_same_size(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    return _build(work, "other", encoder, "b", 60), True


def _same_corpus_rebuilt(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    return _build(work, "rebuilt", encoder, "a", 60), True  # another index, though equal rows


def _first_60_then_other(work: Path, first: Path, encoder: TableEncoder) -> tuple[Path, bool]:
    """Another index whose first rows are not the collection's, grown past its size."""
    other = _build(work, "other", encoder, "b", 30)
    _build(work, "other", encoder, "a", 50, append=True)
    return other, True


CASES: list[tuple[str, Callable, bool]] = [
    ("the same index again", _same_index, False),
    ("a copy of the index", _copied, False),
    ("the index grown by an append", _grown, False),
    ("another corpus, more rows", _other_corpus_larger, True),
    ("another corpus, as many rows", _other_corpus_same_size, True),
    ("the same corpus in another index", _same_corpus_rebuilt, True),
    ("another index with more rows", _first_60_then_other, True),
]


def _state(target: RemoteTarget) -> tuple[int, set[int], dict]:
    collection = MilvusCollection.connect(target)
    try:
        return collection.count(), collection.rows_present(0, 1000), collection.read_record().to_json()
    finally:
        collection.close()


@pytest.mark.parametrize(("name", "second", "refused"), CASES, ids=[c[0] for c in CASES])
def test_append_checks_the_index_and_the_corpus(
    tmp_path: Path, tiny_bert: Path, name: str, second: Callable, refused: bool
) -> None:
    encoder = _table(tiny_bert)
    first = _build(tmp_path, "idx", encoder, "a", 60)
    target = RemoteTarget.parse(str(tmp_path / "m.db"), "docs")
    push_index(first, target)
    source, other = second(tmp_path, first, encoder)
    assert other == refused
    before = _state(target)
    result = CliRunner().invoke(app, ["push", str(source), target.uri, "--collection", "docs", "--append"])
    if refused:
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error:") and result.output.count("\n") == 1
        assert "push without --append to replace its rows, or use another --collection" in result.output
        assert _state(target) == before  # nothing written
    else:
        assert result.exit_code == 0, result.output
        count, rows, record = _state(target)
        expected = 80 if name == "the index grown by an append" else 60
        assert (count, rows, record["count"]) == (expected, set(range(expected)), expected)


def test_a_killed_first_push_of_another_corpus_is_not_finished_by_this_one(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = _table(tiny_bert)
    other = _build(tmp_path, "other", encoder, "b", 60)
    mine = _build(tmp_path, "idx", encoder, "a", 60)
    target = RemoteTarget.parse(str(tmp_path / "m.db"), "docs")
    real = MilvusCollection.upsert
    calls: list[int] = []

    def dies_after_one(self, rows, documents, vectors):
        calls.append(len(rows))
        if len(calls) > 1:
            raise RunFailure("killed")
        real(self, rows, documents, vectors)

    monkeypatch.setattr(MilvusCollection, "upsert", dies_after_one)
    with pytest.raises(RunFailure):
        push_index(other, target, batch_size=20)
    monkeypatch.setattr(MilvusCollection, "upsert", real)
    result = CliRunner().invoke(app, ["push", str(mine), target.uri, "--collection", "docs", "--append"])
    assert result.exit_code == 2 and "another index" in result.output
    resumed = push_index(other, target, append=True, batch_size=20)  # its own source finishes it
    assert resumed.sent == 40
