"""The fusion calibration's candidates, its record, and the rule that chooses among them.

No fixed fusion fits every collection: where BM25 is near the model (Cranfield) equal-weight
z-score fusion gains 6 nDCG@10 points over dense, where it is far behind (msmarco-5k, DBpedia) it
costs points and only `prf` at dense weight 0.7 never harms. An index holds what tells these
apart: its own documents. `embedkit.evaluation.fusion_calibration` scores every candidate of
`CANDIDATES` on pseudo queries cut from them; `choose` (the rule of docs/hybrid.md) turns that
table into a `Calibration`, recorded in the index metadata (`IndexMeta.fusion`). Every search reads
it (`embedkit.search.request.fusion_for`) unless told otherwise: nothing is computed at search time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from embedkit.evaluation.paired_bootstrap import PairedBootstrap
from embedkit.search.fusion import DEFAULT_ALPHA
from embedkit.search.request import default_choice, label

# The candidates, as (method, dense weight) (docs/hybrid.md). "dense" is search without BM25.
CANDIDATES: tuple[tuple[str, float | None], ...] = (
    ("dense", None),
    ("prf", 0.5),
    ("prf", 0.7),
    *(("zscore", a) for a in (0.5, 0.6, 0.7, 0.8)),
    *(("minmax", a) for a in (0.5, 0.6, 0.7, 0.8)),
    ("rrf", None),
)
COMMON = "ict-common"  # the ict queries without their rare words (`without_rare_words`)
LEXICAL = "bm25"  # BM25 alone: measured (the rule reads its share of dense), never chosen
REGROW = 1.5  # an append recalibrates once the index holds this many times the documents calibrated on


def needs_calibration(meta: dict[str, Any], count: int) -> bool:
    """Whether an index of `count` documents should be calibrated (again): none yet, or grown by half."""
    record = meta.get("fusion")
    return not record or count >= REGROW * max(1, int(record.get("count", 0)))


# --- the rule -------------------------------------------------------------------------------------
# Measured on Cranfield and msmarco-5k, whole and cut short (judged queries beside pseudo queries);
# the tables and the reasoning are in docs/hybrid.md.

# what the rule reads, the first with enough queries: terms queries are BM25's own words
RULE_KINDS = ("ict", "title", "window")
MIN_RULE_QUERIES = 30  # fewer queries of a kind than this: its intervals are too wide to read
TOWARD_DENSE = 0.1  # the weight chosen sits this much toward dense from the best on pseudo queries
WEIGHTED = ("zscore", "minmax")
# Where the rule reads window queries (records without sentences or titles) it falls back to prf at
# dense weight 0.5, not 0.7: on both such collections measured (Cranfield and msmarco-5k cut short,
# judged queries) prf 0.5 stood clearly above dense (+2.02 [+0.83, +3.21], +1.08 [+0.03, +2.19]),
# prf 0.7 on one of them; the collection that argued for 0.7 everywhere (DBpedia entity
# descriptions, where every other fusion harmed) has titles and sentences, so its index reads title
# or ict queries and keeps prf 0.7 (docs/hybrid.md).
WINDOW_FALLBACK = ("prf", 0.5)

Scores = Mapping[str, Mapping[str, Sequence[float]]]  # candidate -> kind -> nDCG@10 x 100 per query


class Choice(NamedTuple):
    method: str
    alpha: float
    reason: str


def score_table(scores: Scores, bootstrap_seed: int = 0) -> tuple[dict, dict]:
    """candidate -> kind -> mean nDCG@10 x 100, and -> [low, high] its bootstrap interval."""
    table: dict[str, dict[str, float]] = {}
    intervals: dict[str, dict[str, list[float]]] = {}
    for name, by_kind in scores.items():
        table[name], intervals[name] = {}, {}
        for kind, values in by_kind.items():
            low, high = PairedBootstrap(len(values), seed=bootstrap_seed).interval(values)
            table[name][kind] = round(float(np.mean(values)), 2)
            intervals[name][kind] = [round(low, 2), round(high, 2)]
    return table, intervals


def kind_read(counts: Mapping[str, int]) -> str | None:
    """The kind the rule reads, given the queries of each kind: the first of `RULE_KINDS` with at
    least `MIN_RULE_QUERIES`, else None."""
    return next((k for k in RULE_KINDS if counts.get(k, 0) >= MIN_RULE_QUERIES), None)


def rule_kind(scores: Scores) -> str | None:
    """`kind_read` of the queries scored (dense's scores, one a query)."""
    return kind_read({kind: len(values) for kind, values in scores.get("dense", {}).items()})


def fallback_for(kind: str | None) -> tuple[str, float]:
    """What the rule keeps where the evidence cannot tell: prf 0.7, or `WINDOW_FALLBACK` on window queries."""
    return WINDOW_FALLBACK if kind == "window" else default_choice()


def choose(scores: Scores, bootstrap_seed: int = 0) -> Choice:
    """The rule: the fusion to record, from nDCG@10 x 100 per query, candidate and pseudo-query kind.

    Every comparison is a paired bootstrap over the kind's queries (`paired_bootstrap`); a choice
    other than the fallback, prf 0.7 (the one that never fell below dense on judged queries; prf 0.5
    where the rule reads window queries, `fallback_for`), is taken only on a clear difference.
    1. Read the first kind of `RULE_KINDS` with enough queries (none: the default).
    2. prf 0.7 clearly below dense even on these BM25-flattering queries: the lexical side only
       hurts; dense.
    3. BM25 clearly below dense: the default. A passage cut from its document shares its words, so
       pseudo queries flatter BM25; only where BM25 alone kept up with dense did fusion gain on
       judged queries.
    4. The best of zscore, minmax (dense weight 0.5-0.8) and rrf not clearly above prf 0.7: the
       default. Else that fusion, its weight moved `TOWARD_DENSE` (capped at 0.8): the best weight
       on pseudo queries sat that much toward BM25 from the best on judged ones.
    """
    kind = rule_kind(scores)
    fallback_method, fallback_alpha = fallback_for(kind)
    fallback = label(fallback_method, fallback_alpha)
    # the default of every search, or the one for records without sentences or titles
    keep = "the default" if kind != "window" else f"{fallback}, the fallback on window queries"
    if kind is None:
        return Choice(
            fallback_method,
            fallback_alpha,
            f"fewer than {MIN_RULE_QUERIES} ict, title or window pseudo queries: the default",
        )
    of = {name: by_kind[kind] for name, by_kind in scores.items()}
    boot = PairedBootstrap(len(of["dense"]), seed=bootstrap_seed)
    where = f"on {len(of['dense'])} {kind} pseudo queries"
    versus_dense = boot.difference(of[fallback], of["dense"])
    if versus_dense.verdict == "below":
        return Choice(
            "dense",
            DEFAULT_ALPHA,
            f"{fallback} clearly below dense {where} ({versus_dense.describe()}): no fusion",
        )
    lexical = boot.difference(of[LEXICAL], of["dense"])
    if lexical.verdict == "below":
        return Choice(
            fallback_method,
            fallback_alpha,
            f"BM25 clearly below dense {where} ({lexical.describe()}): {keep}",
        )
    best_method, best_alpha = _best_fusion(of)
    best = label(best_method, best_alpha)
    gain = boot.difference(of[best], of[fallback])
    measured = f"BM25 - dense {lexical.describe()}, {best} - {fallback} {gain.describe()} {where}"
    if gain.verdict != "above":
        return Choice(
            fallback_method, fallback_alpha, f"{measured}: no fusion clearly above {fallback}; {keep}"
        )
    if best_alpha is None:
        return Choice(best_method, DEFAULT_ALPHA, f"{measured}: {best}")
    alpha = round(min(best_alpha + TOWARD_DENSE, max(a for m, a in _fusions() if a is not None)), 2)
    return Choice(best_method, alpha, f"{measured}: {best}, moved to {alpha:g}")


def _fusions() -> list[tuple[str, float | None]]:
    return [(m, a) for m, a in CANDIDATES if m in WEIGHTED or m == "rrf"]


def _best_fusion(of: Mapping[str, Sequence[float]]) -> tuple[str, float | None]:
    """The weighted fusion or rrf with the highest mean; among equal means the larger dense weight,
    then the earlier candidate."""
    fusions = _fusions()
    return max(
        fusions,
        key=lambda c: (float(np.mean(of[label(*c)])), c[1] if c[1] is not None else 0.0, -fusions.index(c)),
    )
