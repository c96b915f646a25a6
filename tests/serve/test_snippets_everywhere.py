"""Every hit on every side has a snippet, and the whole document only when asked for.

`embedkit search --json`, `/search` and the Python collection give the same records (one
`hit_record`, `embedkit.search.hits`): a snippet on every hit, in every mode (the query's words
highlighted where they are in the document, else its start), no `text` unless `include` asks.
The references: the corpus itself (which words a document holds, its text escaped by hand).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from serve_helpers import CORPUS
from typer.testing import CliRunner

import embedkit
from embedkit.cli.app import app
from embedkit.search.hits import SNIPPET_CHARS, lead_snippet

BY_ID = {r["_id"]: r for r in CORPUS}
QUERY = "shock wave on a wing"


def full_text(record: dict) -> str:
    return f"{record['title']} {record['text']}".strip()


def cli_hits(index: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(app, ["search", str(index), QUERY, "-k", "8", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["hits"]


def expected_snippet(record: dict) -> str:
    """The reference: a document holding a word of the query shows it in <b>; another one its start."""
    words = set(QUERY.split()) - {"on", "a"}  # stopwords: BM25 does not match them
    held = [w for w in full_text(record).split() if w in words]
    return f"<b>{held[0]}</b>" if held else html.escape(full_text(record), quote=False)


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_every_side_gives_every_hit_a_snippet_and_no_text(tiny_index: Path, app_client, mode: str) -> None:
    by_cli = cli_hits(tiny_index, "--mode", mode)
    response = app_client.post("/search", json={"query": QUERY, "k": 8, "mode": mode})
    by_http = response.json()["results"][0]["hits"]
    by_python = embedkit.open_collection(tiny_index, device="cpu").query(QUERY, k=8, mode=mode)
    assert by_cli and by_http == by_cli
    assert [{k: v for k, v in h.items() if k != "score"} for h in by_python] == [
        {k: v for k, v in h.items() if k != "score"} for h in by_cli
    ]
    for hit in by_cli:
        assert "text" not in hit
        want = expected_snippet(BY_ID[hit["id"]])
        assert want in hit["snippet"] if want.startswith("<b>") else hit["snippet"] == want


def test_the_whole_text_comes_when_asked(tiny_index: Path, app_client) -> None:
    by_cli = cli_hits(tiny_index, "--include", "text,title")
    response = app_client.post("/search", json={"query": QUERY, "k": 8, "include": ["text", "title"]})
    notes = embedkit.open_collection(tiny_index, device="cpu")
    by_python = notes.query(QUERY, k=8, include=["text", "title"])
    for hits in (by_cli, response.json()["results"][0]["hits"], by_python):
        assert [sorted(h) for h in hits] == [["id", "rank", "score", "text", "title"]] * len(hits)
        assert all(h["text"] == BY_ID[h["id"]]["text"] for h in hits)
    bad = app_client.post("/search", json={"query": QUERY, "include": ["body"]})
    assert bad.status_code == 400 and "unknown hit field 'body'" in bad.text
    result = CliRunner().invoke(app, ["search", str(tiny_index), QUERY, "--include", "body"])
    assert result.exit_code == 2 and "unknown hit field 'body'" in result.output


def test_a_lead_snippet_is_the_start_cut_at_a_word() -> None:
    assert lead_snippet("  a <b>  tag\n & more ") == "a &lt;b&gt; tag &amp; more"
    words = " ".join(f"word{n:03d}" for n in range(100))  # 8 characters a word, with its space
    cut = lead_snippet(words)
    assert len(cut) <= SNIPPET_CHARS and cut.endswith("…")
    # 199 characters hold 24 whole words and the next one up to its end, which may go on: cut before it
    assert cut == " ".join(f"word{n:03d}" for n in range(24)) + "…"
    assert lead_snippet("x" * 300) == "x" * (SNIPPET_CHARS - 1) + "…"
