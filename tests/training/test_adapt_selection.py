"""`embedkit adapt`'s selection: the dev signals, the margin rule, and no work when the base is kept."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.training.adapt.queries import PseudoQuery
from embedkit.training.adapt.signals import (
    SIGNALS,
    cut_rare_words,
    drop_words,
    kept_step,
    rare_cut_queries,
    top_overlap,
    top_rows,
    word_drop_queries,
)

PSEUDO, RARE, OVERLAP, JUDGED = (SIGNALS[k] for k in ("pseudo", "rare-cut", "base-overlap", "judged"))


def test_rare_words_are_cut_by_document_frequency():
    # 100 documents: "flow" in 50, "over" in 40, ..., "hypersonic" in 1, "cone" in none; "the", "of"
    # and "a" are stopwords (never counted, never cut)
    df = Counter({"flow": 50, "over": 40, "boundary": 30, "layer": 20, "hypersonic": 1})
    text = "Hypersonic flow over the boundary layer of a cone."
    # rare is df < 1% of 100 documents: "cone" (0) goes, "hypersonic" (1) stays; at 5% both go
    assert cut_rare_words(text, df, 100) == "Hypersonic flow over the boundary layer of a"
    assert cut_rare_words(text, df, 100, share=0.05) == "flow over the boundary layer of a"
    # too little left: fewer than 3 content words
    assert cut_rare_words("hypersonic cone flow", df, 100, share=0.05) is None


def test_rare_cut_queries_keep_positions_of_the_queries_left():
    df = Counter({"flow": 10, "wing": 10, "lift": 10, "drag": 10})
    queries = [
        PseudoQuery("flow wing lift", 0, "ict", "p0"),
        PseudoQuery("zzz yyy flow", 1, "ict", "p1"),  # only one word left
        PseudoQuery("drag wing flow xxx", 2, "title", "p2"),
    ]
    cut, positions = rare_cut_queries(queries, df, 10)
    assert positions == [0, 2]
    assert [q.text for q in cut] == ["flow wing lift", "drag wing flow"]
    assert [(q.source, q.kind, q.positive) for q in cut] == [(0, "ict", "p0"), (2, "title", "p2")]


def test_word_drop_removes_a_third_of_the_words_keeping_order():
    text = "alpha bravo charlie delta echo foxtrot"
    for seed in range(20):
        kept = drop_words(text, seed).split()
        # round(6 / 3) = 2 words go; the 4 left are a subsequence of the original, in order
        assert len(kept) == 4
        positions = [text.split().index(w) for w in kept]
        assert positions == sorted(positions)
        assert drop_words(text, seed) == drop_words(text, seed)  # seeded: the same every run
    assert len({drop_words(text, seed) for seed in range(20)}) > 1  # the seed chooses which words
    # 4 words lose 1. Dropping the stopword "the" leaves 3 content words: kept; dropping a content
    # word leaves 2: too few, None
    outcomes = {drop_words("the wing lift drag", seed) for seed in range(40)}
    assert outcomes == {None, "wing lift drag"}
    queries = [PseudoQuery("wing lift", 0, "ict", "p0"), PseudoQuery("wing lift drag flow", 1, "ict", "p1")]
    dropped, positions = word_drop_queries(queries)
    assert positions == [1] and dropped[0].source == 1


def test_top_rows_and_overlap_against_a_hand_computed_case():
    docs = np.eye(4, dtype=np.float32)
    queries = np.array([[0.9, 0.5, 0.1, 0.0], [0.0, 0.0, 0.2, 1.0]], dtype=np.float32)
    assert top_rows(queries, docs, k=2).tolist() == [[0, 1], [3, 2]]
    base = np.array([[0, 1], [3, 0]])
    assert top_overlap(np.array([[1, 0], [2, 3]]), base) == pytest.approx((2 / 2 + 1 / 2) / 2)


BASE = {PSEUDO: 0.40, RARE: 0.30, OVERLAP: 1.0}


@pytest.mark.parametrize(
    ("history", "select", "margin", "min_overlap", "force", "kept"),
    [
        # the best step by the selected signal, when it clears the margin
        (
            [(50, {PSEUDO: 0.45, RARE: 0.32, OVERLAP: 0.8}), (100, {PSEUDO: 0.43, RARE: 0.35, OVERLAP: 0.7})],
            "rare-cut",
            0.01,
            0.0,
            False,
            100,
        ),
        (
            [(50, {PSEUDO: 0.45, RARE: 0.32, OVERLAP: 0.8}), (100, {PSEUDO: 0.43, RARE: 0.35, OVERLAP: 0.7})],
            "pseudo",
            0.01,
            0.0,
            False,
            50,
        ),
        # a gain under the margin keeps the base
        ([(50, {PSEUDO: 0.405, RARE: 0.305, OVERLAP: 0.9})], "rare-cut", 0.01, 0.0, False, None),
        # every step worse: the base, unless forced
        (
            [(50, {PSEUDO: 0.30, RARE: 0.20, OVERLAP: 0.5}), (100, {PSEUDO: 0.35, RARE: 0.25, OVERLAP: 0.5})],
            "pseudo",
            0.0,
            0.0,
            False,
            None,
        ),
        (
            [(50, {PSEUDO: 0.30, RARE: 0.20, OVERLAP: 0.5}), (100, {PSEUDO: 0.35, RARE: 0.25, OVERLAP: 0.5})],
            "pseudo",
            0.0,
            0.0,
            True,
            100,
        ),
        # a gain of exactly zero is no gain
        ([(50, {PSEUDO: 0.40, RARE: 0.30, OVERLAP: 1.0})], "pseudo", 0.0, 0.0, False, None),
        # ties go to the earlier step
        (
            [(50, {PSEUDO: 0.5, RARE: 0.4, OVERLAP: 0.9}), (100, {PSEUDO: 0.5, RARE: 0.4, OVERLAP: 0.8})],
            "pseudo",
            0.0,
            0.0,
            False,
            50,
        ),
        # a label-free pick that moved too far from the base's top 10 keeps the base
        ([(50, {PSEUDO: 0.50, RARE: 0.40, OVERLAP: 0.4})], "rare-cut", 0.01, 0.6, False, None),
        ([(50, {PSEUDO: 0.50, RARE: 0.40, OVERLAP: 0.7})], "rare-cut", 0.01, 0.6, False, 50),
        ([], "pseudo", 0.0, 0.0, True, None),
    ],
)
def test_kept_step_applies_the_margin_rule(history, select, margin, min_overlap, force, kept):
    assert kept_step(history, BASE, select, margin, min_overlap, force) == kept


def test_judged_selection_ignores_the_overlap_guard():
    base = {**BASE, JUDGED: 0.5}
    history = [(50, {PSEUDO: 0.1, RARE: 0.1, OVERLAP: 0.1, JUDGED: 0.6})]
    assert kept_step(history, base, "judged", 0.01, 0.9) == 50


def _index(tmp_path: Path, tiny_bert: Path) -> Path:
    from fixture_text import AERO_WORDS

    rng = np.random.default_rng(0)
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as file:
        for i in range(20):
            sentences = [" ".join(rng.choice(AERO_WORDS, 8)) + "." for _ in range(3)]
            file.write(
                json.dumps(
                    {
                        "_id": f"d{i}",
                        "title": " ".join(rng.choice(AERO_WORDS, 3)),
                        "text": " ".join(sentences),
                    }
                )
                + "\n"
            )
    index = tmp_path / "index"
    made = CliRunner().invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)])
    assert made.exit_code == 0, made.output
    return index


def test_a_kept_base_leaves_the_index_as_it_was(tmp_path: Path, tiny_bert: Path, one_thread):
    index = _index(tmp_path, tiny_bert)
    before = sorted(p.name for p in index.iterdir())
    current = (index / "CURRENT").read_text()
    args = [
        "adapt",
        str(index),
        "--out",
        str(tmp_path / "m"),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--eval-steps",
        "1",
        "--lr",
        "1e-3",
        "--margin",
        "0.99",
        "--export",
        str(tmp_path / "onnx"),
        "-q",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "no step cleared the margin" in result.output and "unchanged" in result.output
    assert "gains at least 99.00" in result.output  # the table says the rule
    assert (index / "CURRENT").read_text() == current and sorted(p.name for p in index.iterdir()) == before
    assert not (tmp_path / "onnx").exists()  # nothing exported either
    from safetensors.numpy import load_file

    saved, base = (
        load_file(str(tmp_path / "m" / "model.safetensors")),
        load_file(str(tiny_bert / "model.safetensors")),
    )
    common = [k for k in base if k in saved]
    assert common and all(np.array_equal(saved[k], base[k]) for k in common)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--select", "loss"], "unknown --select"),
        (["--select", "judged"], "needs judged queries"),
        (["--margin", "1.5"], "--margin"),
    ],
)
def test_bad_selection_options_exit_2(tmp_path: Path, extra: list[str], message: str):
    index = tmp_path / "index"
    index.mkdir()
    result = CliRunner().invoke(app, ["adapt", str(index), "--out", str(tmp_path / "m"), *extra, "-q"])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "m").exists()
