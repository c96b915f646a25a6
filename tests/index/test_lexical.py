"""The BM25 lexical index against a hand-written Okapi BM25, appends, and hostile query text."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

import embedkit.index.lexical as lexical
from embedkit.errors import InputError
from embedkit.index.lexical import (
    LexicalSettings,
    add_documents,
    analyze,
    create_lexical,
    drop_lexical,
    has_lexical,
    index_document_table,
    lexical_next_row,
    optimize_lexical,
    read_settings,
    search_lexical,
)


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
QUERIES = {  # query -> its distinct terms, by hand
    "flow": ["flow"],
    "Flowing wings and jets": ["flow", "wing", "jet"],
    "shock heating of layers": ["shock", "heat", "layer"],
    "flow flow FLOWS": ["flow"],
    "边界": ["边", "界"],
}


def okapi_bm25(docs: list[list[str]], query: list[str], k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    """Okapi BM25 with Lucene's IDF, term by term, document by document: the slow obvious way."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    scores: dict[int, float] = {}
    for term in set(query):
        holding = sum(1 for d in docs if term in d)
        idf = math.log(1 + (n - holding + 0.5) / (holding + 0.5))
        for row, d in enumerate(docs):
            f = d.count(term)
            if f:
                scores[row] = scores.get(row, 0.0) + idf * f * (k1 + 1) / (
                    f + k1 * (1 - b + b * len(d) / avgdl)
                )
    return scores


def reference_terms() -> list[list[str]]:
    return [
        terms if terms is not None else analyze(f"{d.title} {d.text}")
        for terms, d in zip(TERMS, DOCS, strict=True)
    ]


def expected_ranking(query_terms: list[str], k: int) -> list[tuple[int, float]]:
    scores = okapi_bm25(reference_terms(), query_terms)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]


def built(docs=DOCS, settings: LexicalSettings | None = None) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    create_lexical(db, settings)
    add_documents(db, 0, docs)
    return db


def assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [row for row, _ in found] == [row for row, _ in expected]
    for (_, score), (_, want) in zip(found, expected, strict=True):
        assert score == pytest.approx(want, rel=1e-12)


def test_analysis_matches_the_hand_written_terms() -> None:
    for doc, terms in zip(DOCS, TERMS, strict=True):
        if terms is not None:
            assert analyze(f"{doc.title} {doc.text}") == terms
    for query, terms in QUERIES.items():
        assert list(dict.fromkeys(analyze(query))) == terms
    assert analyze("The Flows of ＡＩＲ over WINGS, heating!") == ["flow", "air", "over", "wing", "heat"]
    assert analyze("हिन्दी भाषा", LexicalSettings(stemmer="none")) == ["हिन्दी", "भाषा"]  # marks stay in words


@pytest.mark.parametrize("query", list(QUERIES))
def test_scores_match_okapi_bm25_by_hand(query: str) -> None:
    db = built()
    (found,) = search_lexical(db, [query], k=10)
    assert found, "every test query matches something"
    assert_same(found, expected_ranking(QUERIES[query], 10))


def test_term_in_more_than_half_the_documents_still_counts() -> None:
    # "layer" is in 3 of 4 documents: Lucene's IDF keeps it positive (FTS5's would floor it at 1e-6).
    docs = [Doc("", "layer"), Doc("", "layer wave"), Doc("", "layer layer"), Doc("", "wave")]
    (found,) = search_lexical(built(docs), ["layer"], k=10)
    idf = math.log(1 + (4 - 3 + 0.5) / (3 + 0.5))
    assert found[0][1] == pytest.approx(idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 2 / 1.5)), rel=1e-12)
    assert [row for row, _ in found] == [2, 0, 1]


def test_batch_equals_one_query_at_a_time_and_k_cuts() -> None:
    db = built()
    queries = list(QUERIES)
    batch = search_lexical(db, queries, k=2)
    assert batch == [search_lexical(db, [q], k=2)[0] for q in queries]
    assert all(len(hits) <= 2 for hits in batch)
    assert_same(batch[1], expected_ranking(QUERIES[queries[1]], 2))


def test_ties_are_ordered_by_row_including_at_the_cut() -> None:
    docs = [Doc("", "wave"), Doc("", "shock"), Doc("", "shock"), Doc("", "shock"), Doc("", "noise")]
    db = built(docs)
    (hits,) = search_lexical(db, ["shock"], k=2)
    assert [row for row, _ in hits] == [1, 2]
    assert hits[0][1] == hits[1][1]


@pytest.mark.parametrize("split", [[1, 6], [3], [1, 2, 3, 4, 5, 6]])
def test_appending_gives_the_scores_of_building_at_once(split: list[int], monkeypatch) -> None:
    monkeypatch.setattr(lexical, "MAX_SEGMENTS", 3)  # the one-at-a-time split also merges segments
    once = built()
    db = sqlite3.connect(":memory:")
    create_lexical(db)
    bounds = [0, *split, len(DOCS)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        add_documents(db, start, DOCS[start:end])
    assert lexical_next_row(db) == len(DOCS)
    for query, terms in QUERIES.items():
        (found,) = search_lexical(db, [query], k=10)
        assert_same(found, search_lexical(once, [query], k=10)[0])
        assert_same(found, expected_ranking(terms, 10))
    optimize_lexical(db)
    assert db.execute("SELECT COUNT(*) FROM lexical_segments").fetchone()[0] == 1
    for query, terms in QUERIES.items():
        assert_same(search_lexical(db, [query], k=10)[0], expected_ranking(terms, 10))


def test_index_persists_and_fills_from_the_documents_table(tmp_path: Path) -> None:
    path = tmp_path / "docs.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE documents (row INTEGER PRIMARY KEY, id TEXT, title TEXT, text TEXT, metadata TEXT)"
    )
    db.executemany(
        "INSERT INTO documents VALUES (?, ?, ?, ?, NULL)",
        [(i, f"d{i}", d.title, d.text) for i, d in enumerate(DOCS)],
    )
    create_lexical(db, LexicalSettings(stemmer="porter"))
    assert index_document_table(db, batch=3) == len(DOCS)
    assert index_document_table(db) == 0
    db.commit()
    db.close()
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    assert has_lexical(db)
    assert read_settings(db) == LexicalSettings(stemmer="porter")
    (hits,) = search_lexical(db, ["jets"], k=5)
    assert [row for row, _ in hits] == [3]


def test_settings_round_trip_and_refuse_unknown_values() -> None:
    settings = LexicalSettings(stopwords="none", stemmer="porter", k1=0.9, b=0.4)
    assert LexicalSettings.from_json(json.loads(json.dumps(settings.to_json()))) == settings
    for bad in (
        {"stemmer": "klingon"},
        {"stopwords": "all"},
        {"b": 1.5},
        {"k1": "1.2"},
        {"colour": "red"},
        {"version": 99},
    ):
        with pytest.raises(InputError):
            LexicalSettings.from_json({**LexicalSettings().to_json(), **bad})
    with pytest.raises(InputError):
        LexicalSettings.from_json(["not", "a", "dict"])


def test_misuse_is_an_input_error() -> None:
    db = sqlite3.connect(":memory:")
    with pytest.raises(InputError, match="no lexical index"):
        search_lexical(db, ["flow"], k=5)
    create_lexical(db)
    with pytest.raises(InputError, match="already holds"):
        create_lexical(db)
    add_documents(db, 0, DOCS[:2])
    with pytest.raises(InputError, match="cannot add at row 5"):
        add_documents(db, 5, DOCS[2:])
    with pytest.raises(InputError, match="k must be"):
        search_lexical(db, ["flow"], k=0)
    drop_lexical(db)
    assert not has_lexical(db)


def test_corrupt_postings_are_an_input_error() -> None:
    db = built()
    db.execute("UPDATE lexical_postings SET gaps = x'0000' WHERE term = 'flow'")  # 2 bytes for 3 rows
    with pytest.raises(InputError, match="corrupt lexical index"):
        search_lexical(db, ["flow"], k=5)
    assert search_lexical(db, ["shock"], k=5)[0]  # other terms are still read
    db.execute("UPDATE lexical_settings SET value = 'not json' WHERE key = 'settings'")
    with pytest.raises(InputError, match="corrupt lexical index settings"):
        search_lexical(db, ["flow"], k=5)


def test_empty_index_returns_no_hits() -> None:
    db = sqlite3.connect(":memory:")
    create_lexical(db)
    assert search_lexical(db, ["flow", ""], k=5) == [[], []]


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
    db = built()
    (hits,) = search_lexical(db, [query], k=5)
    assert all(isinstance(row, int) and 0 <= row < len(DOCS) and score > 0 for row, score in hits)
    assert hits == search_lexical(db, [query], k=5)[0]


def test_hostile_queries_find_what_their_words_say() -> None:
    db = built()
    results = dict(zip(HOSTILE, search_lexical(db, HOSTILE, k=10), strict=True))
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
    assert db.execute("SELECT COUNT(*) FROM lexical_postings").fetchone()[0] > 0
