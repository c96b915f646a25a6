"""No command writes an output inside an index folder (docs/guarantees.md, `check_not_in_index`).

Every command's output option is tried with every way of pointing inside an index: its top, its
live version, a deeper folder, a symlink to the index, a symlink to one of its versions, and an
index of the older flat layout. Each must be one line, exit 2, and leave the index as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from eval_data import write_beir, write_sts
from runtime_helpers import TableEncoder, write_jsonl
from typer.testing import CliRunner

from embedkit import build_index
from embedkit.cli.app import app
from embedkit.cli.common import check_io
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions

runner = CliRunner()


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("outputs")
    texts = [f"text {i} about wings and flow" for i in range(8)]
    vectors = np.random.default_rng(0).standard_normal((8, 32))
    corpus = write_jsonl(work / "corpus.jsonl", [f"d{i}" for i in range(8)], texts)
    index = work / "idx"
    build_index(
        corpus,
        index,
        TableEncoder(tiny_bert, dict(zip(texts, vectors, strict=True))),
        IndexOptions(kind="flat"),
    )
    live = index / (index / "CURRENT").read_text().strip()
    flat = work / "flat"
    flat.mkdir()
    (flat / "embedkit-index.json").write_text("{}")  # the older layout: the metadata at the top
    os.symlink(index, work / "link-to-index")
    os.symlink(live, work / "link-to-version")
    return {
        "work": work,
        "corpus": corpus,
        "index": index,
        "model": tiny_bert,
        "beir": write_beir(work / "beir"),
        "sts": write_sts(work / "sts.tsv"),
        "top": index / "out",
        "live version": live / "out",
        "deeper": live / "lexical" / "deeper" / "out",
        "through a symlink to the index": work / "link-to-index" / "out",
        "through a symlink to its version": work / "link-to-version" / "out",
        "a flat index": flat / "out",
    }


# each command with {out} where its output goes (the file name is added for file outputs)
COMMANDS = {
    "embed --out": ["embed", "{corpus}", "--out", "{out}.npy", "--model", "{model}"],
    "index --out (an index inside an index)": ["index", "{corpus}", "--out", "{out}", "--model", "{model}"],
    "export --out": ["export", "{model}", "--out", "{out}"],
    "train --out": ["train", "{corpus}", "--out", "{out}", "--base", "{model}"],
    "adapt --out": ["adapt", "{index}", "--out", "{out}"],
    "adapt --export": ["adapt", "{index}", "--out", "{work}/adapted", "--export", "{out}"],
    "experiment --out": ["experiment", "{corpus}", "--out", "{out}"],
    "eval retrieval --json": ["eval", "retrieval", "{beir}", "--json", "{out}.json", "--model", "{model}"],
    "eval retrieval --plot": ["eval", "retrieval", "{beir}", "--plot", "{out}.png", "--model", "{model}"],
    "eval retrieval --per-query": ["eval", "retrieval", "{beir}", "--per-query", "{out}.jsonl"],
    "eval sts --json": ["eval", "sts", "{sts}", "--json", "{out}.json", "--model", "{model}"],
    "eval pseudo --json": ["eval", "pseudo", "{corpus}", "--json", "{out}.json", "--model", "{model}"],
}
WHERE = [
    "top",
    "live version",
    "deeper",
    "through a symlink to the index",
    "through a symlink to its version",
    "a flat index",
]


def _snapshot(folder: Path) -> set[tuple[str, int]]:
    return {(str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_inside_an_index_is_refused(place: dict[str, Path], command: str, where: str) -> None:
    values = {key: str(value) for key, value in place.items()} | {"out": str(place[where])}
    args = [arg.format(**values) for arg in COMMANDS[command]]
    before = _snapshot(place["index"])
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "an index deletes what lives in it; choose a path outside it" in result.output, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert _snapshot(place["index"]) == before


@pytest.mark.parametrize("command", ["export --out", "train --out", "adapt --out", "experiment --out"])
def test_a_folder_output_that_is_an_index_is_refused(place: dict[str, Path], command: str) -> None:
    values = {key: str(value) for key, value in place.items()} | {"out": str(place["index"])}
    result = runner.invoke(app, [arg.format(**values) for arg in COMMANDS[command]])
    assert result.exit_code == 2
    assert f"the output {place['index']} is an index folder" in result.output


def test_the_index_command_may_write_its_own_index_and_outputs_elsewhere_pass(place: dict[str, Path]) -> None:
    check_io(indexes=[place["index"]])  # --append, --overwrite, --reindex-lexical: its own folder
    check_io(indexes=[place["work"] / "link-to-index"])
    check_io(files=[place["work"] / "report.json"], folders=[place["work"] / "model"])
    check_io(files=[place["index"].parent / "idx-report.json"])  # beside the index, not in it
    with pytest.raises(InputError, match="inside the index folder"):
        check_io(indexes=[place["index"] / "nested"])
