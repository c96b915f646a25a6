"""The build's count of documents cut at the model's maximum length is the tokenizer's own count of
the corpus: the calibration's pseudo queries and re-embedded documents are not counted again."""

from __future__ import annotations

from pathlib import Path

import pytest
from calibration_fixtures import calibration_documents, write_jsonl_docs

from embedkit import build_index

pytest.importorskip("faiss")


def test_truncated_counts_each_long_document_once(tmp_path: Path, tiny_bert: Path) -> None:
    from tokenizers import Tokenizer

    docs = calibration_documents()
    for doc in docs[::2]:  # half of them short enough for the tiny model's 64 tokens
        doc["text"] = doc["text"].split(". ")[0] + "."
    report = build_index(write_jsonl_docs(tmp_path / "c.jsonl", docs), tmp_path / "idx", tiny_bert)
    assert report.calibrated is not None  # the calibration ran, and embedded texts of its own

    untruncated = Tokenizer.from_file(str(tiny_bert / "tokenizer.json"))
    untruncated.no_truncation()
    longest = 64  # tests/tiny_models.py: max_position_embeddings
    texts = [f"{d['title']} {d['text']}".strip() for d in docs]
    assert report.truncated == sum(len(untruncated.encode(t).ids) > longest for t in texts)


def test_the_passage_advice_followed_cuts_nothing(tmp_path: Path, tiny_bert: Path) -> None:
    from embedkit.jobs.index_options import IndexOptions

    docs = calibration_documents()
    corpus = write_jsonl_docs(tmp_path / "c.jsonl", docs)
    whole = build_index(corpus, tmp_path / "whole", tiny_bert, IndexOptions(calibrate=False))
    assert whole.truncated == len(docs) and whole.passage_advice is not None
    options = IndexOptions(passages=whole.passage_advice, calibrate=False)
    assert build_index(corpus, tmp_path / "advised", tiny_bert, options).truncated == 0
    # windows of the model's whole length leave no room for the title and [CLS]/[SEP]
    cut = build_index(corpus, tmp_path / "full", tiny_bert, IndexOptions(passages="64:16", calibrate=False))
    assert cut.truncated > 0


def _long_ids(docs: list[dict], tiny_bert: Path) -> list[str]:
    """The reference: the ids, in corpus order, of the documents over the tiny model's 64 tokens."""
    from tokenizers import Tokenizer

    untruncated = Tokenizer.from_file(str(tiny_bert / "tokenizer.json"))
    untruncated.no_truncation()
    texts = {d["_id"]: f"{d['title']} {d['text']}".strip() for d in docs}
    return [doc_id for doc_id, text in texts.items() if len(untruncated.encode(text).ids) > 64]


def test_the_note_names_the_documents_cut(tmp_path: Path, tiny_bert: Path) -> None:
    from typer.testing import CliRunner

    from embedkit.cli.app import app
    from embedkit.jobs.index_options import IndexOptions

    docs = calibration_documents()
    for doc in docs[:20]:  # the first half short: the long ones are not simply the first
        doc["text"] = doc["text"].split(". ")[0] + "."
    long_ids = _long_ids(docs, tiny_bert)
    assert len(long_ids) > 6
    corpus = write_jsonl_docs(tmp_path / "c.jsonl", docs)
    report = build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(calibrate=False, device="cpu"))
    assert report.truncated_ids == tuple(long_ids[:5])
    assert report.truncated_documents == report.truncated == len(long_ids)
    args = ["index", str(corpus), "--out", str(tmp_path / "cli"), "-m", str(tiny_bert), "--no-calibrate"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    expected = (
        f"{len(long_ids)} documents were longer than the model's maximum length and truncated "
        f"({', '.join(long_ids[:5])} and {len(long_ids) - 5} more)"
    )
    assert expected in result.output
    embedded = tmp_path / "v.npy"  # `embed` names them the same way
    result = CliRunner().invoke(app, ["embed", str(corpus), "--out", str(embedded), "-m", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    assert expected in result.output
    one = write_jsonl_docs(
        tmp_path / "one.jsonl", [docs[0], next(d for d in docs if d["_id"] == long_ids[0])]
    )
    result = CliRunner().invoke(
        app, ["index", str(one), "--out", str(tmp_path / "one"), "-m", str(tiny_bert)]
    )
    assert result.exit_code == 0, result.output
    assert (
        f"1 document was longer than the model's maximum length and truncated ({long_ids[0]})"
        in result.output
    )


@pytest.mark.parametrize(
    ("truncated", "what", "names", "documents", "expected"),
    [
        (
            1,
            "document",
            ["a.md"],
            1,
            "1 document was longer than the model's maximum length and truncated (a.md)",
        ),
        (3, "document", [], 0, "3 documents were longer than the model's maximum length and truncated"),
        (
            7,
            "document",
            list("abcde"),
            7,
            "7 documents were longer than ... and truncated (a, b, c, d, e and 2 more)",
        ),
        (1, "passage", ["a"], 1, "1 passage was longer than ... and truncated (in a)"),
        (
            9,
            "passage",
            list("abcde"),
            6,
            "9 passages were longer than ... and truncated (in a, b, c, d, e and 1 more document)",
        ),
        (4, "passage", ["a", "b"], 2, "4 passages were longer than ... and truncated (in a, b)"),
    ],
)
def test_the_note_counts_in_words(truncated, what, names, documents, expected) -> None:
    from rich.console import Console

    from embedkit.cli.common import print_truncated

    console = Console(record=True, width=40)
    print_truncated(console, truncated, what, names=names, documents=documents)
    line = console.export_text().strip()
    assert line == expected.replace("than ... and", "than the model's maximum length and")
