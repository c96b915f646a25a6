"""Metadata filters (`--where`): filtered search equals brute force over the documents that pass.

References: each expression of the table has a hand-written Python predicate over the metadata;
the dense side must give the exact cosine top-k among the documents it accepts (numpy), the
lexical side the unfiltered BM25 run restricted to them, hybrid (zscore, rrf) the fusion of those
two references; bad expressions are one line naming the position, exit 2.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.index.where import parse
from embedkit.jobs.index_options import IndexOptions
from embedkit.search.fusion import fuse

pytest.importorskip("faiss")
pytest.importorskip("lark")

TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]
QUERIES = ["shock wave on a wing", "heat transfer in the boundary layer", "buckling of a thin shell"]
N = 60


def _metadata(i: int) -> dict:
    meta: dict = {"score": round((i * 37 % 100) / 100, 2), "source": ["web", "paper", "book"][i % 3]}
    if i % 11:
        meta["year"] = "n/a" if i % 13 == 0 else 2000 + (i * 7) % 25
    if i % 9:
        meta["lang"] = ["en", "de", "fr", "en"][i % 4]
    day = date(2015, 1, 1) + timedelta(days=53 * i)
    meta["published"] = f"{day.isoformat()}T12:00:00" if i % 10 == 0 else day.isoformat()
    if i % 5 < 2:
        meta["flag"] = i % 5 == 0
    return meta


def _num(m: dict, key: str) -> float | None:
    value = m.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(m: dict, key: str) -> str | None:
    return m.get(key) if isinstance(m.get(key), str) else None


def _day(m: dict) -> datetime:
    return datetime.fromisoformat(m["published"])


# expression -> the documents it keeps, written independently of the parser
CASES = {
    "year >= 2015": lambda m: (_num(m, "year") or 0) >= 2015,
    'lang = "en"': lambda m: _str(m, "lang") == "en",
    "lang in ['de', 'fr']": lambda m: _str(m, "lang") in ("de", "fr"),
    # three-valued logic: a comparison on a missing field or another type is unknown, `not` keeps it so
    'year >= 2010 and year < 2020 and not lang = "en"': lambda m: (
        _num(m, "year") is not None and 2010 <= m["year"] < 2020 and _str(m, "lang") not in (None, "en")
    ),
    'source = "web" or score > 0.5': lambda m: m["source"] == "web" or m["score"] > 0.5,
    "published >= 2020-06-01": lambda m: _day(m) >= datetime(2020, 6, 1),
    'published < "2019-01-01T00:00:00"': lambda m: _day(m) < datetime(2019, 1, 1),
    "flag = true": lambda m: m.get("flag") is True,
    "flag != TRUE": lambda m: m.get("flag") is False,
    'NOT (lang = "en" OR lang == "de")': lambda m: _str(m, "lang") not in (None, "en", "de"),
    "not (year < 2010 or flag = true)": lambda m: (
        _num(m, "year") is not None and m["year"] >= 2010 and m.get("flag") is False
    ),
    "year < 2010 or not flag = true": lambda m: (_num(m, "year") or 9999) < 2010 or m.get("flag") is False,
    'lang != "en"': lambda m: _str(m, "lang") is not None and m["lang"] != "en",
    "year = 2012": lambda m: _num(m, "year") == 2012,
    "score in (0.25, 0.74, 1)": lambda m: m["score"] in (0.25, 0.74, 1.0),
    "year > 3000": lambda m: False,
    '(source = "book" and flag = false) or (year <= 2003 and published > 2016-01-01)': lambda m: (
        (m["source"] == "book" and m.get("flag") is False)
        or ((_num(m, "year") or 9999) <= 2003 and _day(m) > datetime(2016, 1, 1))
    ),
}


@pytest.fixture(scope="module", params=["flat", "hnsw"])
def filtered(request, tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path):
    folder = tmp_path_factory.mktemp(f"where-{request.param}")
    ids = [f"d{i}" for i in range(N)]
    texts = [f"{TOPICS[i % 6]} case {i} with {TOPICS[(i * 5 + 1) % 6]} measured" for i in range(N)]
    metas = [_metadata(i) for i in range(N)]
    corpus = folder / "c.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for doc_id, text, meta in zip(ids, texts, metas, strict=True):
            f.write(json.dumps({"_id": doc_id, "text": text, **meta}) + "\n")
    rng = np.random.default_rng(3)
    encoder = TableEncoder(tiny_bert, {t: rng.standard_normal(32) for t in [*texts, *QUERIES]})
    build_index(corpus, folder / "idx", encoder, IndexOptions(kind=request.param))
    index = SearchIndex.load(folder / "idx")
    yield index, encoder, ids, texts, metas
    index.close()


def _dense_reference(encoder, texts, keep, k) -> list[list[tuple[int, float]]]:
    rows = [i for i in range(N) if keep[i]]
    if not rows:
        return [[] for _ in QUERIES]
    scores, order = brute_force(encoder.encode([texts[i] for i in rows]), encoder.encode(QUERIES), k)
    return [
        [(rows[j], float(s)) for j, s in zip(o, sc, strict=True)] for o, sc in zip(order, scores, strict=True)
    ]


@pytest.mark.parametrize("expression", list(CASES))
def test_filtered_dense_lexical_and_hybrid_equal_brute_force(filtered, expression: str) -> None:
    index, encoder, ids, texts, metas = filtered
    keep = [CASES[expression](m) for m in metas]
    k = 5
    dense = index.search_text(QUERIES, k=k, encoder=encoder, mode="dense", where=expression)
    expected = _dense_reference(encoder, texts, keep, k)
    assert [[h.row for h in hits] for hits in dense] == [[r for r, _ in e] for e in expected]
    for hits, e in zip(dense, expected, strict=True):
        np.testing.assert_allclose([h.score for h in hits], [s for _, s in e], atol=1e-5)
    # lexical: the unfiltered run over every document, restricted to those that pass
    everything = index.search_text(QUERIES, k=N, mode="lexical")
    restricted = [[(h.row, h.score) for h in hits if keep[h.row]] for hits in everything]
    lexical = index.search_text(QUERIES, k=k, mode="lexical", where=expression)
    assert [[(h.row, pytest.approx(h.score)) for h in hits] for hits in lexical] == [
        r[:k] for r in restricted
    ]
    # hybrid: the fusion of the two restricted rankings, at the fusion depth (every passing document)
    deep = _dense_reference(encoder, texts, keep, N)
    for method in ("zscore", "rrf"):
        hybrid = index.search_text(QUERIES, k=k, encoder=encoder, fusion=method, where=expression)
        for hits, d, x in zip(hybrid, deep, restricted, strict=True):
            reference = fuse(d, x, k, method=method) if x else [type("F", (), {"row": r})() for r, _ in d[:k]]
            assert [h.row for h in hits] == [f.row for f in reference]
    prf = index.search_text(QUERIES, k=k, encoder=encoder, where=expression)  # the default fusion
    assert all(keep[h.row] for hits in prf for h in hits)
    assert [len(hits) for hits in prf] == [min(k, sum(keep))] * len(QUERIES)


def test_filters_of_a_loaded_index_are_reused(filtered) -> None:
    index = filtered[0]
    first = index.store.compile_filter("year >= 2015")
    assert index.store.compile_filter("year >= 2015") is first  # computed once per expression


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("year >=", "ends early, at position 8"),
        ("year 2015", "unexpected '2015' at position 6"),
        ('lang = "en', "at position 8"),
        ("(year = 1", "ends early, at position 10"),
        ("year = 2015 lang", "unexpected 'lang' at position 13"),
        ("published > 2020-02-30", "'2020-02-30' at position 13 is not a valid date"),
        ("", "the filter (where) is empty"),
    ],
)
def test_bad_expressions_name_the_position(expression: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("yeer = 2015", "unknown metadata field 'yeer' at position 1"),
        ('year = 2015 and source > "a"', "> at position 17 compares numbers and dates"),
        ("lang = 3", "field 'lang' at position 1 holds strings, not a number"),
        ("source in ('web', 2)", "holds strings, not a number"),
        ("flag > 1", "field 'flag' at position 1 holds booleans, not a number"),
        ("published < 2020", "holds dates and strings, not a number"),
    ],
)
def test_unknown_fields_and_wrong_types_are_refused(filtered, expression: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        filtered[0].search_text(QUERIES, k=3, mode="lexical", where=expression)


def test_cli_where(filtered) -> None:
    index, _, _, _, metas = filtered
    runner = CliRunner()
    args = ["search", str(index.path), "heat transfer", "--json", "-k", "20", "--mode", "lexical"]
    result = runner.invoke(app, [*args, "--where", 'lang = "en" and year >= 2010'])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout.strip().splitlines()[-1])["hits"]
    keep = {
        f"d{i}" for i, m in enumerate(metas) if _str(m, "lang") == "en" and (_num(m, "year") or 0) >= 2010
    }
    assert hits and {h["id"] for h in hits} <= keep
    for bad, line in [
        ("year >", "error: where: the expression ends early, at position 7 (expected a value)"),
        ("colour = 'red'", "error: where: unknown metadata field 'colour' at position 1"),
    ]:
        result = runner.invoke(app, [*args, "--where", bad])
        assert result.exit_code == 2
        assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(line)


def test_recorded_field_types_are_those_sqlite_finds_in_the_metadata(filtered) -> None:
    from embedkit.index.fields import read_fields, scan_fields

    store = filtered[0].store.docs
    recorded = read_fields(store._db)  # the table written as documents were added (Python's types)
    assert recorded == scan_fields(store._db)  # SQLite's json_each over the stored JSON
    assert recorded["year"] == {"integer", "text"} and recorded["published"] == {"date"}
