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
    from embedkit.jobs.index_build import IndexOptions

    docs = calibration_documents()
    corpus = write_jsonl_docs(tmp_path / "c.jsonl", docs)
    whole = build_index(corpus, tmp_path / "whole", tiny_bert, IndexOptions(calibrate=False))
    assert whole.truncated == len(docs) and whole.passage_advice is not None
    options = IndexOptions(passages=whole.passage_advice, calibrate=False)
    assert build_index(corpus, tmp_path / "advised", tiny_bert, options).truncated == 0
    # windows of the model's whole length leave no room for the title and [CLS]/[SEP]
    cut = build_index(corpus, tmp_path / "full", tiny_bert, IndexOptions(passages="64:16", calibrate=False))
    assert cut.truncated > 0
