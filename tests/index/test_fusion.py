"""Rank fusion against rankings computed by hand, ties and missing sides included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedkit.errors import InputError
from embedkit.search.fusion import FusedHit, check_fusion, feedback_query, fuse, rrf, weighted

# One query. Dense ranks rows 10, 20, 30; lexical ranks 30, 40, 10.
DENSE = [(10, 0.9), (20, 0.8), (30, 0.7)]
LEXICAL = [(30, 12.0), (40, 9.0), (10, 3.0)]


def rows(hits: list[FusedHit]) -> list[int]:
    return [hit.row for hit in hits]


def test_rrf_by_hand_with_ties_broken_by_row() -> None:
    hits = rrf(DENSE, LEXICAL, k=10)
    # 10: ranks 1 and 3; 30: ranks 3 and 1 -> equal; 20: dense rank 2 only; 40: lexical rank 2 only -> equal.
    assert rows(hits) == [10, 30, 20, 40]
    assert hits[0] == FusedHit(10, 1 / 61 + 1 / 63, 0.9, 3.0)
    assert hits[1] == FusedHit(30, 1 / 63 + 1 / 61, 0.7, 12.0)
    assert hits[2] == FusedHit(20, 1 / 62, 0.8, None)
    assert hits[3] == FusedHit(40, 1 / 62, None, 9.0)
    assert hits[0].score == hits[1].score and hits[2].score == hits[3].score


def test_rrf_constant_and_cut() -> None:
    hits = rrf(DENSE, LEXICAL, k=1, rrf_k=0)
    assert hits == [FusedHit(10, 1 / 1 + 1 / 3, 0.9, 3.0)]  # 30 ties at 1/3 + 1/1 and loses on row
    assert fuse(DENSE, LEXICAL, 3, "rrf") == rrf(DENSE, LEXICAL, 3)
    assert fuse(DENSE, LEXICAL, 3) == weighted(DENSE, LEXICAL, 3, alpha=0.7)  # the default: z-score, 0.7


def zscores(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / std for v in values]


def test_zscore_by_hand() -> None:
    zd = dict(zip([10, 20, 30], zscores([0.9, 0.8, 0.7]), strict=True))  # 1.2247, 0, -1.2247
    zl = dict(zip([30, 40, 10], zscores([12.0, 9.0, 3.0]), strict=True))  # 1.0690, 0.2673, -1.3363
    floor_d, floor_l = min(zd.values()), min(zl.values())
    for alpha in (0.3, 0.5, 0.7):
        expected = {
            10: alpha * zd[10] + (1 - alpha) * zl[10],
            20: alpha * zd[20] + (1 - alpha) * floor_l,  # missed by lexical: its lowest candidate's z
            30: alpha * zd[30] + (1 - alpha) * zl[30],
            40: alpha * floor_d + (1 - alpha) * zl[40],  # missed by dense
        }
        hits = weighted(DENSE, LEXICAL, k=10, alpha=alpha)
        assert rows(hits) == sorted(expected, key=lambda r: -expected[r])
        for hit in hits:
            assert hit.score == pytest.approx(expected[hit.row], abs=1e-12)
    # At alpha 0.5: 10 (-0.056), 30 (-0.078), 40 (-0.479), 20 (-0.668).
    assert rows(weighted(DENSE, LEXICAL, k=10, alpha=0.5)) == [10, 30, 40, 20]
    assert rows(weighted(DENSE, LEXICAL, k=10, alpha=0.7)) == [10, 20, 30, 40]
    assert rows(weighted(DENSE, LEXICAL, k=10, alpha=0.0)) == [30, 40, 10, 20]


def test_minmax_by_hand_with_a_tie() -> None:
    # dense -> 10: 1, 20: 0.5, 30: 0; lexical -> 30: 1, 40: 2/3, 10: 0; a missing side counts 0.
    hits = fuse(DENSE, LEXICAL, 10, "minmax", alpha=0.5)
    assert rows(hits) == [10, 30, 40, 20]  # 10 and 30 tie at 0.5: row order
    assert [hit.score for hit in hits] == pytest.approx([0.5, 0.5, 1 / 3, 0.25])
    assert hits[0].score == hits[1].score
    assert hits[2] == FusedHit(40, pytest.approx(1 / 3), None, 9.0)


@pytest.mark.parametrize("method", ["rrf", "zscore", "minmax"])
def test_an_empty_side_leaves_the_other_sides_order(method: str) -> None:
    hits = fuse(DENSE, [], 10, method)
    assert rows(hits) == [10, 20, 30]
    assert all(hit.lexical_score is None for hit in hits)
    assert rows(fuse([], LEXICAL, 10, method)) == [30, 40, 10]
    assert fuse([], [], 10, method) == []


@pytest.mark.parametrize("method", ["zscore", "minmax"])
def test_a_side_of_equal_scores_carries_no_order(method: str) -> None:
    flat = [(40, 5.0), (30, 5.0)]
    assert rows(fuse(DENSE, flat, 10, method, alpha=0.2)) == [10, 20, 30, 40]


def test_repeated_and_negative_rows() -> None:
    dense = [(10, 0.9), (-1, -3.4e38), (10, 0.1), (20, 0.8)]  # FAISS pads with -1; repeats keep the first
    hits = rrf(dense, [], k=10)
    assert hits == [FusedHit(10, 1 / 61, 0.9, None), FusedHit(20, 1 / 62, 0.8, None)]


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="unknown fusion method"):
        fuse(DENSE, LEXICAL, 10, "borda")
    with pytest.raises(InputError, match="alpha"):
        weighted(DENSE, LEXICAL, 10, alpha=1.5)
    with pytest.raises(InputError, match="k must be"):
        rrf(DENSE, LEXICAL, 0)
    with pytest.raises(InputError, match="NaN"):
        weighted([(1, float("nan"))], LEXICAL, 10)
    with pytest.raises(InputError, match="rrf_k"):
        rrf(DENSE, LEXICAL, 10, rrf_k=-1)


def test_feedback_query_is_rocchio_by_hand() -> None:
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    feedback = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    # q + 0.5 * mean = (1, 0.25, 0.25), norm sqrt(1.125)
    expected = np.array([1.0, 0.25, 0.25]) / math.sqrt(1.125)
    np.testing.assert_allclose(feedback_query(query, feedback), expected, rtol=1e-6)
    np.testing.assert_allclose(
        feedback_query(query, feedback, beta=2.0), np.array([1, 1, 1]) / math.sqrt(3), rtol=1e-6
    )
    assert feedback_query(query, np.empty((0, 3), np.float32)) is query  # no feedback: the query itself


def test_prf_and_bad_settings_are_refused_where_they_cannot_run() -> None:
    with pytest.raises(InputError, match="unknown fusion method 'prf' for `fuse`"):
        fuse(DENSE, LEXICAL, 3, "prf")  # no score fusion: the search pipeline runs it
    check_fusion("prf", 0.7)
    with pytest.raises(InputError, match="unknown fusion method"):
        check_fusion("borda", 0.5)
    with pytest.raises(InputError, match="alpha"):
        check_fusion("zscore", 1.5)
