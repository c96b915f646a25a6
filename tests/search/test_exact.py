"""The one exact top-k (`embedkit.search.exact`) against a brute-force sort, its tie rule included."""

from __future__ import annotations

import numpy as np
import pytest

import embedkit.search.exact as exact
from embedkit.errors import InputError
from embedkit.search.exact import exact_top_k, exact_top_k_of_blocks, tie_ranks, top_k


def brute_force(queries, docs, k, tie_rank=None):
    """Every (score, tie, row) sorted in Python: the obvious reading of the tie rule."""
    ties = range(len(docs)) if tie_rank is None else tie_rank
    out = []
    for q in queries:
        pairs = enumerate(zip(docs, ties, strict=True))
        scored = sorted((-float(q @ d), int(t), row) for row, (d, t) in pairs)
        out.append([row for _, _, row in scored[:k]])
    return out


@pytest.mark.parametrize("k", [1, 3, 10, 60])
@pytest.mark.parametrize("by_id", [False, True])
def test_exact_top_k_matches_a_full_sort_with_many_ties(monkeypatch: pytest.MonkeyPatch, k: int, by_id: bool):
    monkeypatch.setattr(exact, "SEARCH_CHUNK", 7)  # the running top-k merges across chunks
    monkeypatch.setattr(exact, "QUERY_BLOCK", 3)
    rng = np.random.default_rng(k)
    docs = rng.integers(-2, 3, (50, 3)).astype(np.float32)  # small integers: many equal scores
    queries = rng.integers(-2, 3, (8, 3)).astype(np.float32)
    tie_rank = tie_ranks([f"d{i}" for i in rng.permutation(50)]) if by_id else None
    scores, rows = exact_top_k(queries, docs, k, tie_rank)
    assert rows.tolist() == brute_force(queries, docs, k, tie_rank)
    assert rows.shape == (8, min(k, 50))
    np.testing.assert_array_equal(scores, np.take_along_axis(queries @ docs.T, rows, axis=1))


@pytest.mark.parametrize("block", [1, 4, 13, 50])
def test_blocks_merge_to_the_full_sort_ties_to_the_lower_row(block: int):
    rng = np.random.default_rng(block)
    docs = rng.integers(-2, 3, (50, 3)).astype(np.float64)  # many equal scores across the blocks
    queries = rng.integers(-2, 3, (6, 3)).astype(np.float64)
    blocks = (docs[i : i + block] for i in range(0, len(docs), block))
    scores, rows = exact_top_k_of_blocks(queries, blocks, 10)
    assert rows.tolist() == brute_force(queries, docs, 10)
    assert scores.dtype == np.float64
    np.testing.assert_array_equal(scores, np.take_along_axis(queries @ docs.T, rows, axis=1))
    with pytest.raises(InputError, match="no blocks"):
        exact_top_k_of_blocks(queries, iter([]), 10)


def test_ties_go_to_the_lower_row_or_the_larger_id():
    docs = np.ones((4, 2), np.float32)
    query = np.ones((1, 2), np.float32)
    assert exact_top_k(query, docs, 2)[1].tolist() == [[0, 1]]
    # trec_eval's order: equal scores by id descending ("d3" at row 1, "d2" at 2, "d1" at 3, "d0" at 0)
    assert exact_top_k(query, docs, 4, tie_ranks(["d0", "d3", "d2", "d1"]))[1].tolist() == [[1, 2, 3, 0]]


def test_excluded_rows_score_minus_infinity():
    docs = np.eye(3, dtype=np.float32)
    scores, rows = exact_top_k(docs, docs, 3, exclude=np.array([0, -1, 2]))
    assert rows[0].tolist() == [1, 2, 0] and scores[0, -1] == -np.inf
    assert rows[1].tolist() == [1, 0, 2]


def test_top_k_of_given_rows_breaks_ties_by_row_value():
    scores = np.array([[1.0, 2.0, 2.0, 1.0]], np.float32)
    rows = np.array([[9, 7, 3, 1]])
    assert top_k(scores, rows, 3)[1].tolist() == [[3, 7, 1]]


def test_bad_shapes_and_k_are_refused():
    with pytest.raises(InputError, match="dim"):
        exact_top_k(np.ones((1, 2)), np.ones((3, 4)), 1)
    with pytest.raises(InputError, match="k must be at least 1"):
        exact_top_k(np.ones((1, 2)), np.ones((3, 2)), 0)
