"""What the commands print does not depend on the terminal's width (COLUMNS).

Status lines stay one line however narrow the terminal and however long the paths in them;
tables may fold their text, but a path, an id or a number in them is never split.
"""

from __future__ import annotations

import json

import pytest
from eval_data import DOCS, write_beir
from typer.testing import CliRunner

from embedkit.cli.app import app

LONG_ID = "a-document-id-longer-than-forty-columns-0001"
LONG_PATH = "/data/aerodynamics/reports/1958/boundary-layer-separation.txt"
RECORDS = [
    {"_id": LONG_ID, "text": f"the wing flow is high, measured in {LONG_PATH}"},
    {"_id": "g1", "text": "a man is playing guitar on the beach"},
    {"_id": "s1", "text": "shock wave and boundary layer on the wing"},
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # A folder name longer than the narrowest terminal tested, so every path printed is too.
    folder = tmp_path_factory.mktemp("width") / ("a-folder-name-wider-than-a-narrow-terminal-" * 2)
    folder.mkdir()
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def _run(args: list[str], columns: str):
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("columns", ["40", "300"])
def test_status_lines_stay_whole(corpus, tiny_bert, columns):
    out = corpus.parent / f"idx-{columns}"
    index = _run(["index", corpus, "--out", out, "--model", tiny_bert, "--device", "cpu"], columns)
    assert index.stdout.splitlines()[0].startswith("indexed 3 documents on torch/cpu in ")
    assert index.stdout.splitlines()[0].endswith(f"s: {out} now holds 3")

    search = _run(["search", out, "wing flow", "--json", "--device", "cpu"], columns)
    assert search.stderr.splitlines() == [
        f"{out}: 3 documents (flat); hybrid search (prf, dense weight 0.7, the index's default); "
        f"model {tiny_bert} (torch, cpu)"
    ]

    vectors = corpus.parent / f"vectors-{columns}.npy"
    embed = _run(["embed", corpus, "--model", tiny_bert, "--out", vectors, "--device", "cpu"], columns)
    assert embed.stdout.splitlines()[-1] == f"wrote {vectors} and {vectors.with_suffix('.ids.txt')}"


def test_a_narrow_table_splits_no_path_id_or_number(corpus, tiny_bert):
    out = corpus.parent / "idx-table"
    _run(["index", corpus, "--out", out, "--model", tiny_bert, "--device", "cpu"], "40")
    hits = json.loads(_run(["search", out, "wing flow", "--json", "--device", "cpu"], "40").stdout)["hits"]
    table = _run(["search", out, "wing flow", "--device", "cpu"], "40").stdout
    assert LONG_ID in table and LONG_PATH in table
    for hit in hits:
        assert f"{hit['score']:.4f}" in table


def test_a_narrow_eval_table_keeps_its_numbers(tmp_path, tiny_bert):
    beir = write_beir(tmp_path / "a-benchmark-folder-with-a-name-wider-than-forty-columns")
    report = tmp_path / "report.json"
    args = ["eval", "retrieval", beir, "--model", tiny_bert, "--device", "cpu", "--json", report]
    printed = _run([*args, "--mode", "all"], "40").stdout
    metrics = json.loads(report.read_text())["metrics"]
    for mode in ("dense", "lexical", "hybrid"):
        for name, value in metrics[mode].items():
            assert name in printed
            assert f"{value:.4f}" in printed
    assert f"4 judged queries, {len(DOCS)} documents, exact search" in printed.splitlines()
