"""/search holds the filter bounds the CLI and the Python API hold (docs/guarantees.md, sections 7
and 8): a number of any length in `where` is a 400 naming it, never a 500; a filter nested to the
stated depth, in any arrangement, is answered, never reported as a corrupt store.

References: which numbers a store holds is decided with Python's Decimal (any number of digits);
the documents a deep filter passes are those of its one leaf that decides it (written out here:
`year = 1960` holds for w1 alone, and each level's other part is false or unknown).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

from embedkit.index.where import MAX_DEPTH  # noqa: E402


@pytest.fixture(scope="module")
def client(app_client):
    return app_client


def _held(text: str) -> bool:
    return -(2**63) <= Decimal(text) <= 2**63 - 1  # Decimal reads any number of digits exactly


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(
    sign=st.sampled_from(["", "-"]),
    zeros=st.integers(0, 5_000),
    digits=st.integers(1, 6_000),
    op=st.sampled_from(["=", "<", ">=", "!="]),
    listed=st.booleans(),
)
def test_a_number_of_any_length_in_where_is_a_400_or_an_answer(client, sign, zeros, digits, op, listed):
    literal = sign + "0" * zeros + "7" * digits
    where = f"year in [1, {literal}]" if listed else f"year {op} {literal}"
    response = client.post("/search", json={"query": "wing", "where": where})
    if _held(literal):
        assert response.status_code == 200, response.text[:300]
        return
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert "beyond the 64-bit integers" in error["message"] and error["param"] == "where"
    assert len(error["message"]) < 1_000  # the number is shown by its ends and its length


def _chain(depth: int, right: bool, with_not: bool) -> str:
    """`year = 1960` under `depth` levels of alternating and/or (and `not not` pairs), the deep
    part on the right or on the left; each level's other part is false or unknown for every document."""
    text, level = "year = 1960", 1
    while level < depth:
        if with_not and level + 2 < depth:
            text, level = f"not (not ({text}))", level + 2
        if level % 2:
            text = f"(year > 1000) and ({text})" if right else f"({text}) and (year > 1000)"
        else:
            text = f"(year = 1) or ({text})" if right else f"({text}) or (year = 1)"
        level += 1
    return text


@pytest.mark.parametrize("right", [True, False], ids=["right", "left"])
@pytest.mark.parametrize("with_not", [False, True], ids=["and-or", "with-not"])
@pytest.mark.parametrize("depth", [MAX_DEPTH - 2, MAX_DEPTH])
def test_a_filter_at_the_stated_depth_is_answered(client, right: bool, with_not: bool, depth: int):
    response = client.post("/search", json={"query": "wing", "k": 8, "where": _chain(depth, right, with_not)})
    assert response.status_code == 200, response.text[:300]
    assert [hit["id"] for hit in response.json()["results"][0]["hits"]] == ["w1"]
