"""Fusion of one query's dense and lexical rankings into one ranking (hybrid search).

Inputs, for one query: the dense candidates and the lexical candidates, each a list of (row,
score) best first (FAISS inner products; BM25 scores from `embedkit.index.lexical`). Output: a list of
`FusedHit(row, score, dense_score, lexical_score)`, best first, at most `k` long; `dense_score` /
`lexical_score` are the side's raw score, None where that side did not return the row.

Methods
- `rrf`: reciprocal-rank fusion (Cormack, Clarke & Buettcher 2009, "Reciprocal Rank Fusion
  outperforms Condorcet and Individual Rank Learning Methods"): score = sum over the sides that
  returned the row of 1 / (rrf_k + rank), rank counted from 1, rrf_k = 60 as in the paper. A side
  that did not return the row adds 0. Uses ranks only, so it needs no calibration between BM25's
  unbounded scores and cosine similarities, and has no weight to tune.
- `zscore`: alpha * z(dense) + (1 - alpha) * z(lexical), each side's scores standardised over that
  side's own candidates for this query (mean 0, population standard deviation 1). `alpha` is the
  dense weight.
- `minmax`: the same with (s - min) / (max - min) over the side's candidates, in [0, 1].

Missing sides in the weighted methods: a row one side did not return gets, for that side, the
normalised score of that side's lowest candidate, i.e. it counts as no better than the worst
document the side did return (it ranked below them all); this never rewards being missed. A side
with no candidates (a query with no lexical terms), or whose candidates all score the same,
carries no ranking information and contributes 0 to every row, so the other side's order stands.

- `prf` (the default): dense pseudo-relevance feedback from the hybrid ranking. The z-score
  fusion at `alpha` picks the top `PRF_DOCS` documents; the query vector moves toward their mean
  vector (Rocchio 1971, "Relevance Feedback in Information Retrieval": q' = q + beta * mean(d),
  re-normalised; `feedback_query`) and the dense side is searched again with q'. The final
  ranking is that dense search: BM25 chooses what the query should look like, the model ranks.
  A query with no lexical hits keeps its dense ranking. It needs the documents' vectors and a
  second dense search, so the search pipeline runs it (`embedkit.search.pipeline`); `fuse` does
  the score fusions, and `feedback_query` the moved query.

Default (an index without a calibration; `embedkit.evaluation.fusion_calibration` records a choice per
index): `prf` with z-score alpha 0.7 (dense-heavier), 3 feedback documents, beta 0.5. Measured
with the bundled model (`benchmarks/hybrid.py`, benchmarks/README.md), nDCG@10 against dense:
Cranfield +4.2 (z-score 0.5 gave +6.6 there), msmarco-5k +1.3 (z-score 0.5: -1.8, because
BM25 is 7 points behind a model already trained on web questions). Equal-weight fusion lets a
weak BM25 pull good dense rankings down; with feedback the final ranking is the model's own, so
it stays within 0.2 of dense on the collections measured where BM25 is weak, and gains where
BM25 finds what the model missed. `zscore` at alpha 0.7 is the next best (+5.3 / +0.0).

Determinism: rows repeated within one side keep their first (best) entry; negative rows (FAISS's
padding when an approximate index finds fewer than asked) are dropped; equal fused scores are
ordered by row, ascending. Sums are formed in a fixed order (dense term, then lexical term), so a
row's fused score does not depend on the order of the input lists beyond its ranks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from embedkit.errors import InputError

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI reads the defaults at start-up
    import numpy as np

FUSION_METHODS = ("prf", "zscore", "rrf", "minmax")
DEFAULT_FUSION = "prf"  # see the module docstring for the measurements behind it
RRF_K = 60  # Cormack et al. 2009
DEFAULT_ALPHA = 0.7  # the dense weight of z-score / min-max, and of prf's first ranking
PRF_DOCS = 3  # feedback documents: the top of the first (z-score) ranking
PRF_WEIGHT = 0.5  # beta, the weight of their mean vector (Rocchio)

Ranking = Sequence[tuple[int, float]]


class FusedHit(NamedTuple):
    row: int
    score: float  # the fused score: higher is better
    dense_score: float | None  # the dense side's raw score, None if it did not return the row
    lexical_score: float | None  # likewise for the lexical side


def fuse(
    dense: Ranking,
    lexical: Ranking,
    k: int,
    method: str = "zscore",
    *,
    alpha: float = DEFAULT_ALPHA,
    rrf_k: float = RRF_K,
) -> list[FusedHit]:
    """Fuse one query's two rankings with `method` (zscore, rrf or minmax); the best `k` rows.

    `prf` is no score fusion: its first stage is `zscore`, its feedback and second search the
    pipeline's (see above).
    """
    if method == "rrf":
        return rrf(dense, lexical, k, rrf_k=rrf_k)
    if method in ("zscore", "minmax"):
        return weighted(dense, lexical, k, alpha=alpha, normalization=method)
    raise InputError(f"unknown fusion method {method!r} for `fuse`: use zscore, rrf or minmax")


def check_fusion(method: str, alpha: float) -> None:
    """An `InputError` for an unknown method or a dense weight outside [0, 1] (before any work)."""
    if method not in FUSION_METHODS:
        raise InputError(f"unknown fusion method {method!r}: use {', '.join(FUSION_METHODS)}")
    if not (0.0 <= alpha <= 1.0):
        raise InputError(f"alpha (the dense weight) must be in [0, 1], got {alpha}")


def feedback_query(query: np.ndarray, feedback: np.ndarray, beta: float = PRF_WEIGHT) -> np.ndarray:
    """Rocchio's feedback query: the unit vector of q + beta * mean(feedback documents' vectors).

    `query` [dim] unit length, `feedback` [m, dim]; with no feedback documents, `query` itself.
    """
    import numpy as np

    if not len(feedback):
        return query
    moved = query.astype(np.float64) + beta * np.asarray(feedback, dtype=np.float64).mean(axis=0)
    norm = np.linalg.norm(moved)
    return (moved / norm).astype(np.float32) if norm > 0 else query


def rrf(dense: Ranking, lexical: Ranking, k: int, *, rrf_k: float = RRF_K) -> list[FusedHit]:
    """Reciprocal-rank fusion: sum of 1 / (rrf_k + rank) over the sides that returned the row."""
    bounded_k(k)
    if not (math.isfinite(rrf_k) and rrf_k >= 0):
        raise InputError(f"rrf_k must be a finite number >= 0, got {rrf_k}")
    sides = _clean(dense), _clean(lexical)
    rows = _union(*sides)
    ranks = [{row: rank for rank, row in enumerate(side, start=1)} for side in sides]

    def contribution(side: int, row: int) -> float:
        rank = ranks[side].get(row)
        return 0.0 if rank is None else 1.0 / (rrf_k + rank)

    fused = {row: contribution(0, row) + contribution(1, row) for row in rows}
    return _top(fused, sides, k)


def weighted(
    dense: Ranking,
    lexical: Ranking,
    k: int,
    *,
    alpha: float = DEFAULT_ALPHA,
    normalization: str = "zscore",
) -> list[FusedHit]:
    """alpha * norm(dense) + (1 - alpha) * norm(lexical), normalised per query and side."""
    bounded_k(k)
    if not (0.0 <= alpha <= 1.0):
        raise InputError(f"alpha (the dense weight) must be in [0, 1], got {alpha}")
    if normalization not in ("zscore", "minmax"):
        raise InputError(f"unknown normalization {normalization!r}: use zscore or minmax")
    sides = _clean(dense), _clean(lexical)
    normalised = [_normalise(side, normalization) for side in sides]
    floors = [min(values.values(), default=0.0) for values in normalised]
    fused = {
        row: alpha * normalised[0].get(row, floors[0]) + (1.0 - alpha) * normalised[1].get(row, floors[1])
        for row in _union(*sides)
    }
    return _top(fused, sides, k)


# The one bound on k, for every side and every store (here, where every search ends: fusion):
# a search for k hits among `held` documents (or rows) is answered with min(k, held) of them, so
# k beyond the documents an index holds gives every document and no side allocates room for k
# (faiss allocates k results a query; tantivy's top-k collector reserves k places, and a k of
# 10**12 aborts the process there). The server refuses a k over its --max-k before this.
def bounded_k(k: int, held: int | None = None) -> int:
    """`k` checked (an integer, at least 1, as `embedkit.arguments.whole_number` has it: else an
    `InputError`) and, given `held` (what the store holds), at most `held` (never below 1, so an
    empty store still reads as a search of 1). Checked here, not there: a search's flow stays in
    its own modules."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InputError(f"k must be a whole number, not {type(k).__name__}")
    if k < 1:
        raise InputError(f"k must be at least 1, got {int(k) if k > -(2**63) else 'a number beyond 64 bits'}")
    return int(k) if held is None else min(int(k), max(1, int(held)))


def _clean(ranking: Ranking) -> dict[int, float]:
    """row -> score in the given order; first entry of a repeated row; no negative rows."""
    side: dict[int, float] = {}
    for row, score in ranking:
        row, score = int(row), float(score)
        if math.isnan(score):
            raise InputError(f"score of row {row} is NaN")
        if row >= 0 and row not in side:
            side[row] = score
    return side


def _union(dense: dict[int, float], lexical: dict[int, float]) -> list[int]:
    return list(dict.fromkeys([*dense, *lexical]))


def _normalise(side: dict[int, float], normalization: str) -> dict[int, float]:
    values = list(side.values())
    if not values:
        return {}
    if normalization == "zscore":
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        if std == 0.0:
            return dict.fromkeys(side, 0.0)
        return {row: (score - mean) / std for row, score in side.items()}
    low, high = min(values), max(values)
    if high == low:
        return dict.fromkeys(side, 0.0)
    return {row: (score - low) / (high - low) for row, score in side.items()}


def _top(fused: dict[int, float], sides: tuple[dict[int, float], dict[int, float]], k: int) -> list[FusedHit]:
    best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
    return [FusedHit(row, score, sides[0].get(row), sides[1].get(row)) for row, score in best]
