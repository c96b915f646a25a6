"""The tantivy BM25 lexical side against a hand-written Okapi BM25, appends, and hostile query text."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from embedkit.errors import InputError
from embedkit.index.lexical import LexicalIndex, LexicalSettings, analyze, term_spans


@dataclass(frozen=True)
class Doc:
    title: str
    text: str


DOCS = [
    Doc("Wing flows", "Flow over the wing is a turbulent flow."),
    Doc("", "Shock waves and shock layers"),
    Doc("Heat transfer", "heating of the boundary layer in a flow"),
    Doc("Jets", "jet thrust"),
    Doc("Flow", ""),
    Doc("Переход", "Пограничный слой и переход"),  # Cyrillic: "transition", "boundary layer and transition"
    Doc("边界层", "湍流边界层"),  # Chinese: "boundary layer", "turbulent boundary layer"
]
# The same documents after analysis, written out by hand: casefold, Lucene's English stopwords
# dropped (the, is, a, and, of, in), Snowball English stems (flows -> flow, heating -> heat,
# turbulent -> turbul, boundary -> boundari), each Chinese character a term of its own.
TERMS = [
    ["wing", "flow", "flow", "over", "wing", "turbul", "flow"],
    ["shock", "wave", "shock", "layer"],
    ["heat", "transfer", "heat", "boundari", "layer", "flow"],
    ["jet", "jet", "thrust"],
    ["flow"],
    None,  # Cyrillic stems are not checked by hand; the reference uses the index's own terms
    ["边", "界", "层", "湍", "流", "边", "界", "层"],
]
QUERIES = {  # query -> its terms, in order, by hand (a repeated term counts once per occurrence)
    "flow": ["flow"],
    "Flowing wings and jets": ["flow", "wing", "jet"],
    "shock heating of layers": ["shock", "heat", "layer"],
    "flow flow FLOWS": ["flow", "flow", "flow"],
    "边界": ["边", "界"],
}


def okapi_bm25(docs: list[list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    """Okapi BM25 with Lucene's IDF, summed over the query's term occurrences (as Lucene and bm25s
    do), term by term, document by document: the slow obvious way."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    scores: dict[int, float] = {}
    for term in query:  # every occurrence, so a repeated query term counts again
        holding = sum(1 for d in docs if term in d)
        idf = math.log(1 + (n - holding + 0.5) / (holding + 0.5))
        for row, d in enumerate(docs):
            f = d.count(term)
            if f:
                scores[row] = scores.get(row, 0.0) + idf * f * (k1 + 1) / (
                    f + k1 * (1 - b + b * len(d) / avgdl)
                )
    return scores


def reference_terms(docs=DOCS, terms=TERMS) -> list[list[str]]:
    return [
        hand if hand is not None else analyze(f"{d.title} {d.text}")
        for hand, d in zip(terms, docs, strict=True)
    ]


def expected_ranking(
    query_terms: list[str], k: int, docs: list[list[str]] | None = None
) -> list[tuple[int, float]]:
    scores = okapi_bm25(docs or reference_terms(), query_terms)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]


def built(docs=DOCS, folder: Path | None = None) -> LexicalIndex:
    index = LexicalIndex.create(folder)
    index.add(0, docs)
    index.commit()
    return index


def assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [row for row, _ in found] == [row for row, _ in expected]
    for (_, score), (_, want) in zip(found, expected, strict=True):
        assert score == pytest.approx(want, rel=1e-5)  # tantivy scores in float32


def test_analysis_matches_the_hand_written_terms() -> None:
    for doc, terms in zip(DOCS, TERMS, strict=True):
        if terms is not None:
            assert analyze(f"{doc.title} {doc.text}") == terms
    for query, terms in QUERIES.items():
        assert analyze(query) == terms
    assert analyze("The Flows of ＡＩＲ over WINGS, heating!") == ["flow", "air", "over", "wing", "heat"]
    assert analyze("हिन्दी भाषा", LexicalSettings(stemmer="none")) == ["हिन्दी", "भाषा"]  # marks stay in words
    assert analyze("x_y flow-rate 2.5", LexicalSettings(stemmer="none")) == [
        "x",
        "y",
        "flow",
        "rate",
        "2",
        "5",
    ]


@pytest.mark.parametrize("query", list(QUERIES))
def test_scores_match_okapi_bm25_by_hand(query: str) -> None:
    (found,) = built().search([query], k=10)
    assert found, "every test query matches something"
    assert_same(found, expected_ranking(QUERIES[query], 10))


def test_a_repeated_query_term_counts_once_per_occurrence() -> None:
    index = built()
    (once,), (twice,), (thrice,) = (
        index.search([q], k=10) for q in ("flow", "flow flow", "flows FLOW flowing")
    )
    assert [row for row, _ in twice] == [row for row, _ in once]
    for (_, one), (_, two), (_, three) in zip(once, twice, thrice, strict=True):
        assert two == pytest.approx(2 * one, rel=1e-6) and three == pytest.approx(3 * one, rel=1e-6)
    # a repeated term outweighs a single one: "shock shock heat" puts the shock document first
    (mixed,) = index.search(["heat shock shock"], k=10)
    assert_same(mixed, expected_ranking(["heat", "shock", "shock"], 10))
    assert mixed[0][0] == 1


def test_long_documents_and_verbose_queries_against_the_reference() -> None:
    # 40 documents up to 30 terms (tantivy stores lengths exactly up to 40), queries repeating words
    words = [
        "wing",
        "flow",
        "shock",
        "layer",
        "heat",
        "jet",
        "noise",
        "stall",
        "boundary",
        "thrust",
        "wave",
        "drag",
        "lift",
    ]
    docs = [Doc("", " ".join(words[(i * j + i) % len(words)] for j in range(5 + i % 26))) for i in range(40)]
    terms = reference_terms(docs, [None] * len(docs))
    index = built(docs)
    for query in ["wing wing flow drag drag drag", "shock layer layer heat", "lift lift lift lift noise"]:
        (found,) = index.search([query], k=10)
        assert_same(found, expected_ranking(analyze(query), 10, terms))


def test_term_in_more_than_half_the_documents_still_counts() -> None:
    docs = [Doc("", "layer"), Doc("", "layer wave"), Doc("", "layer layer"), Doc("", "wave")]
    (found,) = built(docs).search(["layer"], k=10)
    idf = math.log(1 + (4 - 3 + 0.5) / (3 + 0.5))
    assert found[0][1] == pytest.approx(idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 2 / 1.5)), rel=1e-6)
    assert [row for row, _ in found] == [2, 0, 1]


def test_batch_equals_one_query_at_a_time_and_k_cuts() -> None:
    index = built()
    queries = list(QUERIES)
    batch = index.search(queries, k=2)
    assert batch == [index.search([q], k=2)[0] for q in queries]
    assert all(len(hits) <= 2 for hits in batch)
    assert_same(batch[1], expected_ranking(QUERIES[queries[1]], 2))


def test_equal_scores_are_ordered_by_row() -> None:
    docs = [Doc("", "wave"), Doc("", "shock"), Doc("", "shock"), Doc("", "shock"), Doc("", "noise")]
    (hits,) = built(docs).search(["shock"], k=3)
    assert [row for row, _ in hits] == [1, 2, 3]
    assert hits[0][1] == hits[1][1] == hits[2][1]


@pytest.mark.parametrize("split", [[1, 6], [3], [1, 2, 3, 4, 5, 6]])
def test_appending_segments_gives_the_scores_of_building_at_once(split: list[int], tmp_path: Path) -> None:
    folder = tmp_path / "lexical"
    index = LexicalIndex.create(folder)
    bounds = [0, *split, len(DOCS)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        index.add(start, DOCS[start:end])
        index.commit()  # one segment per append
    assert index.next_row() == len(DOCS)
    reopened = LexicalIndex.open(folder, LexicalSettings())
    for query, terms in QUERIES.items():
        (found,) = reopened.search([query], k=10)
        assert_same(found, expected_ranking(terms, 10))


def test_a_copied_folder_takes_an_append_and_leaves_the_source_as_it_was(tmp_path: Path) -> None:
    built(DOCS[:4], tmp_path / "v1")
    LexicalIndex.copy_folder(tmp_path / "v1", tmp_path / "v2")
    copy = LexicalIndex.open(tmp_path / "v2", LexicalSettings())
    copy.add(4, DOCS[4:])
    copy.commit()
    source = LexicalIndex.open(tmp_path / "v1", LexicalSettings())
    assert source.next_row() == 4 and copy.next_row() == len(DOCS)
    assert {row for row, _ in source.search(["flow"], k=10)[0]} == {0, 2}
    assert_same(copy.search(["flow"], k=10)[0], expected_ranking(["flow"], 10))


def test_settings_round_trip_and_refuse_unknown_values() -> None:
    settings = LexicalSettings(stopwords="none", stemmer="none")
    assert LexicalSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
    for bad in (
        {"stemmer": "klingon"},
        {"stopwords": "all"},
        {"b": 0.4},
        {"k1": "1.2"},
        {"colour": "red"},
        {"version": 99},
        {"engine": "sqlite"},
    ):
        with pytest.raises(InputError):
            LexicalSettings.from_json({**LexicalSettings().to_json(), **bad})
    with pytest.raises(InputError):
        LexicalSettings.from_json(["not", "a", "dict"])


def test_settings_without_stopwords_or_stemming_are_applied() -> None:
    index = LexicalIndex.create(None, LexicalSettings(stopwords="none", stemmer="none"))
    index.add(0, DOCS)
    index.commit()
    assert {row for row, _ in index.search(["the"], k=10)[0]} == {0, 2}  # a stopword is a term here
    assert {row for row, _ in index.search(["flows"], k=10)[0]} == {0}  # no stemming: only "flows"


def test_misuse_and_damage_are_input_errors(tmp_path: Path) -> None:
    index = built(DOCS[:2], tmp_path / "lexical")
    with pytest.raises(InputError, match="cannot add at row 5"):
        index.add(5, DOCS[2:])
    with pytest.raises(InputError, match="k must be"):
        index.search(["flow"], k=0)
    with pytest.raises(InputError, match="already exists"):
        LexicalIndex.create(tmp_path / "lexical")
    with pytest.raises(InputError, match="lexical index missing"):
        LexicalIndex.open(tmp_path / "nothing", LexicalSettings())
    (tmp_path / "lexical" / "meta.json").write_text("{not json")
    with pytest.raises(InputError, match="corrupt lexical index"):
        LexicalIndex.open(tmp_path / "lexical", LexicalSettings())


def test_empty_index_returns_no_hits() -> None:
    index = LexicalIndex.create(None)
    assert index.search(["flow", ""], k=5) == [[], []]


def test_term_spans_and_idf_are_the_index_s_own() -> None:
    """What snippets read: each term with the characters it came from, and Lucene's IDF."""
    index = built()
    text = "Flow over the wing is a turbulent flow. 边界"
    spans = term_spans(text)
    assert [(term, text[start:end]) for term, start, end in spans] == [
        ("flow", "Flow"), ("over", "over"), ("wing", "wing"), ("turbul", "turbulent"), ("flow", "flow"),
        ("边", "边"), ("界", "界"),
    ]  # fmt: skip
    held = {"flow": 3, "wing": 1, "jet": 1, "absent": 0}  # documents holding each term, by hand (TERMS)
    expected = {t: math.log(1 + (len(DOCS) - n + 0.5) / (n + 0.5)) for t, n in held.items()}
    assert index.term_idf(list(held)) == pytest.approx(expected, rel=1e-6)


HOSTILE = [
    "",
    "   \t\n",
    '"',
    'flow"',
    '"flow',
    "*",
    "flow*",
    "-flow",
    "NEAR",
    "NEAR(flow wing)",
    "flow NEAR/2 wing",
    "AND",
    "OR",
    "NOT",
    "flow AND wing",
    "flow OR",
    ":",
    "body:flow",
    "lexical:flow",
    "(",
    "(flow",
    ")",
    "^",
    "^flow",
    "{flow wing}",
    "+",
    "'; DROP TABLE documents; --",
    "the of and a",  # stopwords only
    "?!.,;:-()[]{}",  # punctuation only
    "🙂🚀",  # emoji only
    "flow 🙂",
    "Привет мир",
    "переход",
    "北京大学",
    "边界层",
    "\x00flow",
    "flow\ud800wing",  # a lone surrogate, which SQLite could not even bind
    "flow " * 5000,
    " ".join(f"w{i}" for i in range(3000)),  # more distinct terms than SQLite's parameter limit
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_return_hits_or_nothing(query: str) -> None:
    index = built()
    (hits,) = index.search([query], k=5)
    assert all(isinstance(row, int) and 0 <= row < len(DOCS) and score > 0 for row, score in hits)
    assert hits == index.search([query], k=5)[0]


def test_hostile_queries_find_what_their_words_say() -> None:
    results = dict(zip(HOSTILE, built().search(HOSTILE, k=10), strict=True))
    for query in ["", "   \t\n", '"', "*", "AND", "OR", "(", "^", "the of and a", "?!.,;:-()[]{}", "🙂🚀"]:
        assert results[query] == [], query
    flow_rows = {0, 2, 4}
    for query in [
        'flow"',
        '"flow',
        "flow*",
        "-flow",
        "body:flow",
        "^flow",
        "\x00flow",
        "flow 🙂",
        "flow " * 5000,
    ]:
        assert {row for row, _ in results[query]} == flow_rows, query
    assert {row for row, _ in results["переход"]} == {5}
    assert {row for row, _ in results["边界层"]} == {6}
    assert {row for row, _ in results["flow\ud800wing"]} == flow_rows
    assert results["'; DROP TABLE documents; --"] == []
