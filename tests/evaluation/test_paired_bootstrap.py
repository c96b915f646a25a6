"""The paired bootstrap against hand-computed cases and the normal-theory interval."""

from __future__ import annotations

import numpy as np
import pytest

from embedkit.evaluation.paired_bootstrap import LEVEL, RESAMPLES, PairedBootstrap


def test_the_defaults_are_the_documented_ones() -> None:
    assert (RESAMPLES, LEVEL) == (2000, 0.95)


def test_a_constant_difference_has_a_point_interval() -> None:
    a = np.linspace(0, 100, 50)
    difference = PairedBootstrap(50).difference(a + 2.0, a)
    assert (difference.mean, difference.low, difference.high) == pytest.approx((2.0, 2.0, 2.0))
    assert difference.verdict == "above"
    assert PairedBootstrap(50).difference(a, a + 2.0).verdict == "below"


def test_pairing_finds_a_small_shift_that_unpaired_scores_hide() -> None:
    # per-query scores spread over 0-100, b one point below a on every query: the means' own
    # intervals overlap by far, the paired difference is exactly 1 everywhere
    a = np.random.default_rng(1).uniform(0, 100, 200)
    boot = PairedBootstrap(200)
    low_a, high_a = boot.interval(a)
    assert high_a - low_a > 5  # each mean known to +-2.5 or worse; the shift is 1
    assert boot.difference(a, a - 1.0).verdict == "above"


def test_the_mean_interval_matches_the_normal_theory_one() -> None:
    # 400 draws: the percentile interval is within a few percent of mean +- 1.96 sd / sqrt(n)
    scores = np.random.default_rng(7).normal(50, 20, 400)
    low, high = PairedBootstrap(400).interval(scores)
    half = 1.96 * scores.std(ddof=1) / np.sqrt(400)
    assert low == pytest.approx(scores.mean() - half, abs=0.1 * half)
    assert high == pytest.approx(scores.mean() + half, abs=0.1 * half)


def test_a_symmetric_difference_is_unclear_and_deterministic() -> None:
    a = np.array([10.0, 0.0] * 100)
    b = np.array([0.0, 10.0] * 100)
    first, second = (
        PairedBootstrap(200, seed=3).difference(a, b),
        PairedBootstrap(200, seed=3).difference(a, b),
    )
    assert first.verdict == "unclear" and first.mean == 0.0
    assert first == second


def test_mismatched_scores_are_refused() -> None:
    with pytest.raises(ValueError, match="expected 3 per-query scores"):
        PairedBootstrap(3).difference([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least one query"):
        PairedBootstrap(0)
