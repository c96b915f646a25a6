"""Qrels that would change or void every metric without a word are refused (docs/guarantees.md).

Each case is a qrels file written by hand; the expected refusal (or the judgments kept) is stated
in the table, not computed by the reader under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_data import write_beir
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.beir import read_qrels
from embedkit.errors import InputError
from embedkit.evaluation.metrics import evaluate_run

HEADER = "query-id\tcorpus-id\tscore"

# (lines after the header, the message's expected fragment); line numbers count the header as 1
REFUSED = [
    (["q\td\t3", "q\td\t0"], "lines 2 and 3 both judge query 'q' and document 'd'"),
    (["q\td\t1", "q\td\t1"], "lines 2 and 3 both judge query 'q' and document 'd'"),  # same grade too
    (["q\td\t1", "r\te\t2", "", "q\td\t2"], "lines 2 and 5 both judge query 'q' and document 'd'"),
    (["q\td\t1", "q\t d \t2"], "both judge query 'q' and document 'd'"),  # the same ids once stripped
    (["q\td\t0", "r\te\t0"], "no query has a relevant document"),
    (["q\td\t0"], "no query has a relevant document"),
    (["q\td\t-1", "r\td\t0"], "no query has a relevant document"),
]
ACCEPTED = [
    (["q\td\t1", "q\te\t0"], {"q": {"d": 1, "e": 0}}),
    (["q\td\t1", "r\td\t0"], {"q": {"d": 1}, "r": {"d": 0}}),  # one document, two queries
    (["q\td\t0", "r\td\t2"], {"q": {"d": 0}, "r": {"d": 2}}),  # one query with a relevant doc suffices
]


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "test.tsv"
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


@pytest.mark.parametrize(("lines", "message"), REFUSED)
def test_duplicate_and_all_zero_qrels_are_refused(tmp_path: Path, lines: list[str], message: str) -> None:
    path = _write(tmp_path, lines)
    with pytest.raises(InputError, match="^" + str(path).replace("\\", "\\\\")) as caught:
        read_qrels(path)
    assert message in str(caught.value)


@pytest.mark.parametrize(("lines", "expected"), ACCEPTED)
def test_distinct_pairs_with_a_relevant_document_are_read(
    tmp_path: Path, lines: list[str], expected: dict
) -> None:
    assert read_qrels(_write(tmp_path, lines)) == expected


def test_in_memory_qrels_without_a_relevant_document_are_refused() -> None:
    with pytest.raises(InputError, match="no query in the qrels has a relevant document"):
        evaluate_run({"q": {"d": 1.0}}, {"q": {"d": 0}, "r": {"e": 0}})


@pytest.mark.parametrize(("lines", "message"), [REFUSED[0], REFUSED[4]])
def test_eval_retrieval_refuses_them_in_one_line_exit_2(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    folder = write_beir(tmp_path / "beir")
    rows = [line.replace("q\t", "q1\t").replace("r\t", "q2\t").replace("\td\t", "\t0\t") for line in lines]
    (folder / "qrels" / "test.tsv").write_text("\n".join([HEADER, *rows]) + "\n")
    result = runner.invoke(app, ["eval", "retrieval", str(folder), "--model", str(tmp_path / "unused")])
    assert result.exit_code == 2, result.output
    assert message.replace("'q'", "'q1'").replace("'d'", "'0'") in result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output


runner = CliRunner()
