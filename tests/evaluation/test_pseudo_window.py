"""Window pseudo queries: short, unpunctuated, untitled records give queries that leave them recognisable."""

from __future__ import annotations

import numpy as np

from embedkit.data.corpus import Document
from embedkit.evaluation.fusion_calibration import CalibrationConfig, pseudo_task
from embedkit.evaluation.pseudo_kinds import WINDOW_KEEPS, WINDOW_WORDS, make_pseudo_queries

VOCABULARY = ("shock", "wave", "wing", "lift", "drag", "layer", "heat", "stall", "jet", "noise", "plate")


def _records(n: int, words: int, seed: int = 0) -> list[Document]:
    """Lower-case records of `words` words, no punctuation, no title: one sentence each to a splitter."""
    rng = np.random.default_rng(seed)
    return [Document(f"d{i}", " ".join(rng.choice(VOCABULARY, words))) for i in range(n)]


def test_a_window_is_a_short_run_of_the_record_and_is_removed_from_it() -> None:
    documents = _records(50, 40)
    queries = make_pseudo_queries(documents, ["ict", "title", "terms", "window"], seed=1)
    windows = [q for q in queries if q.kind == "window"]
    assert len(windows) == 50 and not [q for q in queries if q.kind in ("ict", "title")]
    for q in windows:
        tokens, taken = documents[q.source].text.split(), q.text.split()
        assert WINDOW_WORDS[0] <= len(taken) <= WINDOW_WORDS[1]
        # the window is consecutive words of the record, and the positive is the record without them
        starts = [i for i in range(len(tokens)) if tokens[i : i + len(taken)] == taken]
        assert any(tokens[:i] + tokens[i + len(taken) :] == q.positive.split() for i in starts)
        assert len(q.positive.split()) >= WINDOW_KEEPS * len(taken)


def test_a_record_with_sentences_gives_ict_and_a_short_one_nothing() -> None:
    two_sentences = Document("s", "The wing stalls at high angles. The jet noise rises with speed and heat.")
    short = Document("short", "wing lift drag shock wave stall jet noise heat transfer plate")  # 11 words
    queries = make_pseudo_queries([two_sentences, short, *_records(3, 30)], ["ict", "window"], seed=0)
    kinds = {(q.source, q.kind) for q in queries}
    assert (0, "ict") in kinds and (0, "window") not in kinds
    assert not [k for k in kinds if k[0] == 1]  # 11 words: a window would leave too little
    assert {(r, "window") for r in (2, 3, 4)} <= kinds


def test_without_window_an_unpunctuated_record_keeps_its_ict_word_span() -> None:
    queries = make_pseudo_queries(_records(5, 40), ["ict"], seed=0)  # what `embedkit adapt` asks for
    assert [q.kind for q in queries] == ["ict"] * 5 and all(len(q.text.split()) >= 8 for q in queries)


def test_the_calibration_draws_window_queries_before_terms_on_a_small_corpus() -> None:
    config = CalibrationConfig(queries=40, min_queries=5, every_kind=True)
    task = pseudo_task(_records(60, 40), config)
    counts = {kind: sum(q.kind == kind for q in task.queries) for kind in ("window", "terms")}
    assert counts == {"window": 40, "terms": 20}


def test_by_default_only_the_kind_the_rule_reads_is_drawn() -> None:
    """The rule reads the first of ict, title, window with 30 queries: nothing else is made or
    embedded again, and that kind's queries are the ones every kind's task draws."""
    titled = [
        Document(
            f"d{i}",
            f"The wing stalls at angle {i}. The jet noise rises with speed {i}. Heat flows.",
            f"Wing {i}",
        )
        for i in range(130)
    ]
    only = pseudo_task(titled, CalibrationConfig(queries=40, min_queries=5))
    every = pseudo_task(titled, CalibrationConfig(queries=40, min_queries=5, every_kind=True))
    assert {q.kind for q in only.queries} == {"ict"} and len(only.queries) == 40
    assert {q.kind for q in every.queries} >= {"ict", "title", "terms"}
    assert only.queries == [q for q in every.queries if q.kind == "ict"]
    assert sorted(only.changed) == sorted(q.source for q in only.queries)  # not ict's and title's
    # records without sentences: no ict, so window (terms never: the rule does not read them)
    records = pseudo_task(_records(60, 40), CalibrationConfig(queries=40, min_queries=5))
    assert {q.kind for q in records.queries} == {"window"}


def test_window_queries_are_not_drawn_where_the_rule_reads_ict() -> None:
    sentences = [
        Document(
            f"s{i}", f"The wing stalls at angle {i}. The jet noise rises with speed {i}. Heat flows out."
        )
        for i in range(40)
    ]
    task = pseudo_task([*sentences, *_records(40, 40)], CalibrationConfig(queries=40, min_queries=5))
    kinds = {q.kind for q in task.queries}
    assert "ict" in kinds and "window" not in kinds
