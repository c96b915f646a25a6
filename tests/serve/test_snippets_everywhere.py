"""Every hit on every side has a snippet, and the whole document only when asked for.

`embedkit search --json`, `/search` and the Python collection give the same records (one
`hit_record`, `embedkit.search.hits`): a snippet on every hit, in every mode (the window of its
text that best answers the query, `embedkit.search.snippets`), no `text` unless `include` asks.
The references: the corpus itself (which words a document holds), and a long document whose
answer sentence is written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixture_text import ESPRESSO_ANSWER, espresso_manual
from serve_helpers import CORPUS
from typer.testing import CliRunner

import embedkit
from embedkit.cli.app import app

BY_ID = {r["_id"]: r for r in CORPUS}
QUERY = "shock wave on a wing"


def cli_hits(index: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(app, ["search", str(index), QUERY, "-k", "8", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["hits"]


def expected_snippet(record: dict) -> str:
    """The reference: each text is one short sentence, shown whole (the title apart), the query's
    words in <b> (its stopwords "on" and "a" are no terms)."""
    words = set(QUERY.split()) - {"on", "a"}
    return " ".join(f"<b>{w}</b>" if w in words else w for w in record["text"].split())


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
        assert hit["snippet"] == expected_snippet(BY_ID[hit["id"]])


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


MANUAL = {"_id": "manual", "title": "Aurora Duo Espresso Machine - User Manual", "text": espresso_manual()}


@pytest.fixture(scope="module")
def manual_index(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from embedkit import build_index
    from embedkit.jobs.index_options import IndexOptions

    folder = tmp_path_factory.mktemp("manual-index")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [MANUAL, *CORPUS]), encoding="utf-8")
    return build_index(corpus, folder / "index", model=tiny_onnx, options=IndexOptions(device="cpu")).path


@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
def test_the_answer_deep_in_a_long_document_is_the_snippet_on_every_side(
    manual_index: Path, tiny_onnx: Path, mode: str
) -> None:
    from serve_helpers import in_process

    from embedkit.serve.settings import ServeConfig

    query = "how often should I descale the espresso machine"
    assert MANUAL["text"].index(ESPRESSO_ANSWER) > 2700  # the 49th of 80 sentences
    # by hand: the answer opens the window, and the two sentences after it fit in 198 characters
    # (76 + 1 + 52 + 1 + 55 = 185; a third would make 234)
    expected = (
        "<b>Descale</b> the <b>machine</b> every three months, or monthly where the water is hard. "
        "A finer grind slows the shot and deepens its taste. "
        "The Aurora Duo heats its boiler in about forty seconds."
    )
    args = ["search", str(manual_index), query, "--json", "--mode", mode, "-k", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    by_cli = json.loads(result.stdout)["hits"]
    with in_process(ServeConfig(model=str(tiny_onnx), index=str(manual_index), max_wait_ms=0)) as client:
        by_http = client.post("/search", json={"query": query, "k": 3, "mode": mode}).json()["results"][0][
            "hits"
        ]
    by_python = embedkit.open_collection(manual_index, device="cpu").query(query, k=3, mode=mode)
    (manual,) = [h for h in by_cli if h["id"] == "manual"]
    assert manual["snippet"] == expected
    for hits in (by_http, by_python):
        assert [(h["id"], h["snippet"]) for h in hits] == [(h["id"], h["snippet"]) for h in by_cli]
