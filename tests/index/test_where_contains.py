"""List-valued metadata is filtered by membership (`tags contains "a"`, Chroma's `$contains`).

Reference: a slow, obvious Python evaluator of the same filter over the same records, with SQL's
three-valued logic (a `contains` on a document whose field is no list is unknown); hypothesis
generates the filters (contains, not, and, or over lists of strings, numbers and booleans).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.index.where_dict import expression_of
from embedkit.jobs.index_options import IndexOptions
from embedkit.remote.milvus import milvus_filter

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
pytest.importorskip("faiss")

MEMBERS = ["a", "b", "c", "1", 1, 2, 2.0, 2.5, True, False]
LITERALS = {'"a"': "a", '"b"': "b", '"c"': "c", '"1"': "1", "1": 1, "2": 2, "2.0": 2, "2.5": 2.5}
LITERALS |= {"true": True, "false": False, '"zz"': "zz"}


def _records(count: int = 48) -> list[dict]:
    rng = np.random.default_rng(7)
    rows = []
    for n in range(count):
        meta: dict = {"year": 2000 + n}
        if n % 6:  # a list, possibly empty
            meta["tags"] = [
                MEMBERS[j] for j in rng.choice(len(MEMBERS), int(rng.integers(0, 4)), replace=False)
            ]
        elif n % 12 == 0:
            meta["tags"] = "a"  # a plain string: no list, so `contains` is unknown there
        if n % 4:
            meta["nums"] = [int(v) for v in rng.integers(0, 4, int(rng.integers(1, 3)))]
        rows.append({"_id": f"d{n}", "text": f"wing flow {n}", **meta})
    return rows


RECORDS = _records()


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path):
    folder = tmp_path_factory.mktemp("where-contains")
    corpus = folder / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    rng = np.random.default_rng(0)
    encoder = TableEncoder(tiny_bert, {r["text"]: rng.standard_normal(32) for r in RECORDS})
    build_index(corpus, folder / "idx", encoder, IndexOptions(kind="flat"))
    index = SearchIndex.load(folder / "idx")
    yield folder / "idx", index
    index.close()


def _same(member: object, value: object) -> bool:
    """Python's own equality, within one kind: a boolean is no number here, as in JSON."""
    if isinstance(member, bool) or isinstance(value, bool):
        return isinstance(member, bool) and isinstance(value, bool) and member == value
    if isinstance(member, str) or isinstance(value, str):
        return member == value
    return float(member) == float(value)  # type: ignore[arg-type]


def _truth(tree: tuple, meta: dict) -> bool | None:
    """The filter's value for one document: True, False or None (unknown)."""
    kind = tree[0]
    if kind == "contains":
        held = meta.get(tree[1])
        return None if not isinstance(held, list) else any(_same(m, tree[2]) for m in held)
    if kind == "not":
        inner = _truth(tree[1], meta)
        return None if inner is None else not inner
    if kind == "untrue":  # SQL's IS NOT TRUE: two-valued
        return _truth(tree[1], meta) is not True
    parts = [_truth(part, meta) for part in tree[1:]]
    decisive = kind == "or"  # or: one True decides; and: one False
    if decisive in parts:
        return decisive
    return None if None in parts else not decisive


def _text(tree: tuple) -> str:
    kind = tree[0]
    if kind == "contains":
        return f"{tree[1]} contains {tree[3]}"
    if kind == "not":
        return f"not ({_text(tree[1])})"
    if kind == "untrue":
        return f"({_text(tree[1])}) is not true"
    return "(" + f" {kind} ".join(_text(part) for part in tree[1:]) + ")"


def _leaf(field: str, literal: str) -> tuple:
    return ("contains", field, LITERALS[literal], literal)


LEAVES = st.builds(_leaf, st.sampled_from(["tags", "nums"]), st.sampled_from(sorted(LITERALS)))
TREES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.tuples(st.just("not"), inner),
        st.tuples(st.just("untrue"), inner),
        st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner),
    ),
    max_leaves=6,
)


@hypothesis.settings(max_examples=120, deadline=None)
@hypothesis.given(tree=TREES)
def test_contains_keeps_exactly_the_documents_whose_list_holds_the_value(listed, tree: tuple) -> None:
    _, index = listed
    expected = {r["_id"] for r in RECORDS if _truth(tree, r) is True}
    assert {d.id for d in index.documents_held(_text(tree))} == expected


@pytest.mark.parametrize(
    "expression,message",
    [
        ("nums = 1", "lists: test a member with nums contains 1"),
        ("year contains 2001", "field 'year' holds no lists"),
        ("tags contains", "ends early"),
        ("tags contains [1, 2]", "unexpected"),
    ],
)
def test_what_cannot_be_searched_is_refused(listed, expression: str, message: str) -> None:
    _, index = listed
    with pytest.raises(InputError, match=message):
        index.documents_held(expression)


def test_the_cli_filters_by_membership(listed) -> None:
    path, _ = listed
    runner = CliRunner()
    found = runner.invoke(
        app, ["search", str(path), "wing", "-k", "100", "--where", 'tags contains "b"', "--json"]
    )
    assert found.exit_code == 0, found.output
    expected = {r["_id"] for r in RECORDS if isinstance(r.get("tags"), list) and "b" in r["tags"]}
    assert {h["id"] for h in json.loads(found.stdout)["hits"]} == expected
    refused = runner.invoke(app, ["search", str(path), "wing", "--where", "nums = 2"])
    assert refused.exit_code == 2 and "nums contains 2" in refused.output


def test_chroma_and_milvus_say_the_same_filter() -> None:
    from embedkit.index.where import parse

    assert expression_of({"tags": {"$contains": "a"}}) == '`tags` contains "a"'
    assert milvus_filter(parse('tags contains "a" and not (n = 1 or not n contains 2)')) == (
        '(json_contains(metadata["tags"], "a") and '
        'not ((metadata["n"] == 1 or not (json_contains(metadata["n"], 2)))))'
    )
    with pytest.raises(InputError, match="not run on Milvus"):
        milvus_filter(parse('not (tags contains "a" and n = 1)'))
    with pytest.raises(InputError, match="is not true. is not run on Milvus"):
        milvus_filter(parse("(n = 1) is not true"))
    assert expression_of({"tags": {"$not_contains": "a"}}) == '(`tags` contains "a") is not true'
    with pytest.raises(InputError, match=r"\$nin takes a non-empty list"):
        expression_of({"tags": {"$nin": "a"}})
    with pytest.raises(InputError, match="a value is"):
        expression_of({"tags": {"$contains": ["a"]}})
