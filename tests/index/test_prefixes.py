"""Query and passage prefixes: found in the model folder, recorded in the index, used by every embedder.

References: the model run by hand on the prefixed texts (what the index must hold and what the
queries must be), model cards written as the model families write them, and a rebuilt index.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.encode.loading import load_encoder
from embedkit.encode.prefixes import Prefixes, detect_prefixes, resolve_prefixes
from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions

E5_CARD = 'Each input text should start with "query: " or "passage: ", even for non-English texts.\n'
BGE_CARD = (
    "For retrieval, add the instruction to the query: `Represent this sentence for searching relevant "
    "passages: `; passages need none.\n"
)
DOCS = ["shock wave on the wing", "heat transfer at high mach number", "the cat eats food"]
QUERIES = ["shock wave", "heat transfer"]


def model_with(tmp_path, tiny_bert, name, card=None, prompts=None):
    folder = tmp_path / name
    shutil.copytree(tiny_bert, folder)
    if card is not None:
        (folder / "README.md").write_text(card, encoding="utf-8")
    if prompts is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return folder


def test_model_cards_and_prompts_state_prefixes(tmp_path, tiny_bert, minilm):
    e5 = model_with(tmp_path, tiny_bert, "e5", card=E5_CARD)
    bge = model_with(tmp_path, tiny_bert, "bge", card=BGE_CARD)
    prompted = model_with(
        tmp_path, tiny_bert, "st", card=E5_CARD, prompts={"query": "q> ", "document": "d> "}
    )
    assert (detect_prefixes(e5).query, detect_prefixes(e5).passage) == ("query: ", "passage: ")
    assert (detect_prefixes(bge).query, detect_prefixes(bge).passage) == (
        "Represent this sentence for searching relevant passages: ",
        "",
    )
    assert (detect_prefixes(prompted).query, detect_prefixes(prompted).passage) == ("q> ", "d> ")
    assert detect_prefixes(minilm) == Prefixes()  # the bundled model needs none
    assert detect_prefixes(tiny_bert) == Prefixes()
    # given ones win, each on its own
    assert resolve_prefixes(e5, "", None) == Prefixes("", "passage: ", "given, and README.md (e5)")
    assert resolve_prefixes(e5, "a ", "b ") == Prefixes("a ", "b ", "given")
    with pytest.raises(InputError, match="one line"):
        resolve_prefixes(e5, "a\nb", None)


def corpus(tmp_path, texts, name="c.jsonl", first=0):
    path = tmp_path / name
    path.write_text(
        "".join(json.dumps({"_id": f"d{first + i}", "text": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8",
    )
    return path


def test_index_embeds_with_the_model_cards_prefixes_and_search_uses_them(tmp_path, tiny_bert):
    e5 = model_with(tmp_path, tiny_bert, "e5", card=E5_CARD)
    report = build_index(corpus(tmp_path, DOCS[:2]), tmp_path / "idx", e5, IndexOptions(device="cpu"))
    assert "'query: '" in report.prefixes and "README.md (e5)" in report.prefixes
    with pytest.raises(InputError, match="--passage-prefix 'p: ' differs from the index's 'passage: '"):
        build_index(
            corpus(tmp_path, DOCS[2:], "b.jsonl", 2),
            tmp_path / "idx",
            options=IndexOptions(append=True, passage_prefix="p: "),
        )
    build_index(
        corpus(tmp_path, DOCS[2:], "b.jsonl", 2),
        tmp_path / "idx",
        options=IndexOptions(append=True, device="cpu"),
    )
    encoder = load_encoder(e5, device="cpu")
    want_docs = encoder.encode([f"passage: {t}" for t in DOCS], normalize=True)  # by hand
    want_queries = encoder.encode([f"query: {q}" for q in QUERIES], normalize=True)
    with SearchIndex.load(tmp_path / "idx") as index:
        assert (index.meta["query_prefix"], index.meta["passage_prefix"]) == ("query: ", "passage: ")
        np.testing.assert_allclose(index.rows.vectors([0, 1, 2]), want_docs, atol=1e-5)
        hits = index.search_text(QUERIES, k=3, mode="dense")
        assert index.search_text("passage query", k=3, mode="lexical") == [[]]  # BM25 never sees them
    for q, found in enumerate(hits):
        scores = want_docs @ want_queries[q]
        assert [h.id for h in found] == [f"d{i}" for i in np.argsort(-scores)]
        np.testing.assert_allclose([h.score for h in found], np.sort(scores)[::-1], atol=1e-5)


class Recording:
    """An encoder that remembers every text it was given."""

    def __init__(self, encoder):
        self.encoder, self.seen = encoder, []

    def __getattr__(self, name):
        return getattr(self.encoder, name)

    def encode(self, texts, *args, **kwargs):
        self.seen.extend([texts] if isinstance(texts, str) else texts)
        return self.encoder.encode(texts, *args, **kwargs)


def test_eval_and_reembed_use_the_recorded_prefixes(tmp_path, tiny_bert):
    from embedkit.evaluation import RetrievalEvaluator
    from embedkit.jobs.index_reembed import reembed_index

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(DOCS))
    )
    (beir / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(QUERIES))
    )
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\n")
    given = Prefixes("search: ", "doc: ", "given")
    build_index(
        beir,
        tmp_path / "idx",
        tiny_bert,
        IndexOptions(query_prefix=given.query, passage_prefix=given.passage),
    )
    encoder = Recording(load_encoder(tiny_bert, device="cpu"))
    exact = RetrievalEvaluator(beir, prefixes=given, mode="dense").evaluate(encoder)
    assert sorted(encoder.seen) == sorted([f"search: {q}" for q in QUERIES] + [f"doc: {t}" for t in DOCS])
    encoder.seen.clear()
    indexed = RetrievalEvaluator(beir, index=tmp_path / "idx", mode="dense").evaluate(encoder)
    assert encoder.seen == [f"search: {q}" for q in QUERIES]  # the index's prefix, recorded there
    assert indexed.per_query == exact.per_query
    reembed_index(tmp_path / "idx", tiny_bert, runtime=Runtime(device="cpu"))
    with SearchIndex.load(tmp_path / "idx") as index:
        assert (index.meta["query_prefix"], index.meta["passage_prefix"]) == ("search: ", "doc: ")
        want = encoder.encoder.encode([f"doc: {t}" for t in DOCS], normalize=True)
        np.testing.assert_allclose(index.rows.vectors([0, 1, 2]), want, atol=1e-5)


def test_cli_folder_passages_and_prefixes(tmp_path, tiny_bert):
    from embedkit.cli.app import app

    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "sub" / "long.md").write_text(
        "# Long\n" + " ".join(["flow air pressure"] * 20) + " guitar beach\n"
    )
    (notes / "short.txt").write_text("the cat eats food\n")
    runner = CliRunner()
    args = ["index", str(notes), "--out", str(tmp_path / "idx"), "--model", str(tiny_bert)]
    result = runner.invoke(app, [*args, "--passages", "12:4", "--query-prefix", "q: "])
    assert result.exit_code == 0, result.output
    assert "indexed 2 documents as" in result.output and "query prefix 'q: '" in result.output
    result = runner.invoke(
        app,
        ["search", str(tmp_path / "idx"), "guitar beach", "--json", "--passages", "-k", "1"]
        + ["--include", "title,text,passage"],
    )
    assert result.exit_code == 0, result.output
    (hit,) = json.loads(result.stdout)["hits"]
    assert hit["id"] == "sub/long.md" and hit["title"] == "Long"
    assert hit["passage"]["text"].rstrip().endswith("guitar beach")
    assert hit["text"][hit["passage"]["start"] : hit["passage"]["end"]] == hit["passage"]["text"]
    result = runner.invoke(app, [*args, "--append", "--passages", "64:0"])
    assert result.exit_code == 2 and "differs from the index's passages 12:4" in result.stderr


@pytest.mark.parametrize(
    ("option", "prefix", "says"),
    [
        ("--query-prefix", "q\udcff: ", "not valid UTF-8 text: byte 0xff"),
        ("--passage-prefix", "\ud800", "not valid UTF-8 text: U+D800"),
        ("--query-prefix", "x " * 62, "is 62 tokens long, and the model takes 64"),
        ("--passage-prefix", "wing " * 500, "is 500 tokens long"),
        ("--query-prefix", "a\nb", "must be one line"),
    ],
)
def test_prefixes_that_cannot_be_embedded_are_refused_before_indexing(
    tmp_path, tiny_bert, option, prefix, says
):
    """A prefix is recorded and put before every text: one that is not text, or that leaves the
    model (tiny_bert: 64 tokens) no room for the text, would break or blank every search later."""
    corpus = tmp_path / "c.jsonl"
    from embedkit.cli.app import app

    corpus.write_text('{"_id": "a", "text": "wing flow"}\n', encoding="utf-8")
    args = ["index", str(corpus), "--out", str(tmp_path / "idx"), "-m", str(tiny_bert), option, prefix]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}") and says in lines[0], lines
    assert not (tmp_path / "idx").exists()
