"""Where a new user gets stuck, the output names the way on: the flag that fixes an error, the
page a server serves, an example to copy, and the step of `index` that takes the time.

References: the hints are written out by hand; the flag named in the docs must be one that
`embedkit index --help` lists.
"""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from embedkit.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def _index(tmp_path: Path, model: Path, corpus: Path, *extra: str):
    args = ["index", str(corpus), "--out", str(tmp_path / "idx"), "--model", str(model), "--no-calibrate"]
    return CliRunner().invoke(app, [*args, *extra])


def test_appending_an_id_the_index_holds_names_upsert(tmp_path: Path, tiny_bert: Path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "wing flow"}\n{"id": "b", "text": "sun moon"}\n', encoding="utf-8")
    assert _index(tmp_path, tiny_bert, corpus).exit_code == 0
    result = _index(tmp_path, tiny_bert, corpus, "--append")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "duplicate document id 'a'" in lines[0] and "--upsert" in lines[0]
    assert _index(tmp_path, tiny_bert, corpus, "--append", "--upsert").exit_code == 0


def test_a_corpus_that_repeats_an_id_is_told_so_not_sent_to_upsert(tmp_path: Path, tiny_bert: Path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "wing flow"}\n{"id": "a", "text": "sun moon"}\n', encoding="utf-8")
    result = _index(tmp_path, tiny_bert, corpus)
    assert result.exit_code == 2 and "--upsert" not in result.stderr
    assert "duplicate document id 'a': the corpus gives it twice" in result.stderr


def test_delete_usage_reads_as_ids_repeated():
    usage = _help("delete").splitlines()[0]
    assert usage == "Usage: embedkit delete [OPTIONS] IDX [ID]..."


def test_serve_help_names_the_search_page_and_the_docs():
    text = " ".join(_help("serve").split())
    assert "a search page at /" in text and "/docs" in text


def test_search_help_has_examples_to_copy():
    text = _help("search")
    examples = re.findall(r"^ +(embedkit search .+)$", text, re.MULTILINE)
    assert len(examples) >= 2 and any("--where" in e for e in examples), text


def test_the_main_help_starts_with_searching_documents():
    text = _help()
    first = text.split("\n\n")[1].strip()
    assert first.startswith("Search your own documents"), first
    assert "embedkit index" in text and "miCSE" not in first
    commands = re.findall(r"^  ([a-z-]+)  ", text.split("Commands:")[1], re.MULTILINE)
    assert commands[:3] == ["index", "search", "serve"]


def test_the_quick_start_names_the_calibration_and_how_to_skip_it():
    flags = set(re.findall(r"--[a-z-]+", _help("index")))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Index a folder and search it")[1].split("\n## ")[0]
    search_doc = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    for text in (quick_start, search_doc):
        skip = re.findall(r"`[^`]*(--no-calibrate)[^`]*`", text)
        assert "calibrat" in text and skip and set(skip) <= flags, text[:400]
    # its share of the build's time, in the paragraph that names it
    assert any("calibrat" in p and re.search(r"\(\d+%\)", p) for p in quick_start.split("\n\n")), quick_start
