"""`embedkit search`'s table: a title column, and each snippet one clean line of the hit's text.

The reference is the document written by hand: its title, and the sentence the query's words
are in, as plain words (the Markdown marks and the PDF-like line breaks taken out by hand).
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from embedkit.cli.app import app

RECORDS = [
    {
        "_id": "care",
        "title": "Aurora Duo care guide",
        "text": "## Daily care\n\nWipe the **steam wand** after\nevery use with a *damp* cloth.\n\n"
        "## Descaling\n\nRun the [descale program](https://example.com/descale) every\nthree months.",
    },
    {"_id": "other", "title": "Grinder notes", "text": "A finer grind slows the shot."},
]


def test_the_table_has_a_title_column_and_clean_snippets(tmp_path, tiny_bert) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    out = tmp_path / "idx"
    runner = CliRunner()
    built = runner.invoke(
        app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert), "--device", "cpu"]
    )
    assert built.exit_code == 0, built.output
    args = ["search", str(out), "descale program", "--mode", "lexical", "--device", "cpu"]
    table = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    header = next(line for line in table.stdout.splitlines() if " id " in line)
    assert [cell.strip() for cell in header.strip("┃│ ").split("┃")] == ["#", "id", "title", "score", "text"]
    (row,) = [line for line in table.stdout.splitlines() if " care " in line]
    assert "Aurora Duo care guide" in row
    assert "Run the descale program every three months." in row  # one line: no marks, no breaks
    assert not any(mark in table.stdout for mark in ("**", "##", "](", "https://"))
    as_json = runner.invoke(app, [*args, "--json"])
    (hit,) = json.loads(as_json.stdout)["hits"]
    assert hit["snippet"] == "Run the <b>descale</b> <b>program</b> every three months."
