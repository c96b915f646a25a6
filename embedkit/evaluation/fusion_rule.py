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

from typing import Any, NamedTuple

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
# Measured on Cranfield and msmarco-5k (judged queries beside pseudo queries) and a pilot on four
# collections; the tables and the reasoning are in docs/hybrid.md.

RULE_KINDS = ("ict", "title")  # what the rule reads, in this order: terms queries are BM25's own words
MIN_SHARE = 1.0  # BM25 alone must match dense on pseudo queries before any weight below the default's
TOWARD_DENSE = 0.1  # the weight chosen sits this much toward dense from the best on pseudo queries
WEIGHTED = ("zscore", "minmax")


class Choice(NamedTuple):
    method: str
    alpha: float
    reason: str


def choose(table: dict[str, dict[str, float]]) -> Choice:
    """The rule: the fusion to record, from nDCG@10 per candidate and pseudo-query kind.

    1. Read the first of `RULE_KINDS` the table holds (none: the default).
    2. prf 0.7 below dense even on these BM25-flattering queries: the lexical side only hurts; dense.
    3. BM25's share of dense below `MIN_SHARE`: the never-harm default, prf 0.7. A sentence cut from
       its document shares its words, so pseudo queries flatter BM25 and fusion beats dense on them
       everywhere; only where BM25 alone keeps up with dense did fusion gain on judged queries.
    4. Else the best of zscore, minmax (dense weight 0.5-0.8) and rrf on the pseudo queries, its
       weight moved `TOWARD_DENSE` (capped at 0.8): the best weight on pseudo queries sat that
       much toward BM25 from the best on judged ones.
    """
    kind = next((k for k in RULE_KINDS if k in table.get("dense", {})), None)
    fallback_method, fallback_alpha = default_choice()
    if kind is None:
        return Choice(fallback_method, fallback_alpha, "no ict or title pseudo queries: the default")
    dense, bm25 = table["dense"][kind], table[LEXICAL][kind]
    default = table[label(fallback_method, fallback_alpha)][kind]
    if default < dense:
        return Choice("dense", DEFAULT_ALPHA, f"prf 0.7 fell below dense on {kind} pseudo queries: no fusion")
    share = bm25 / dense if dense > 0 else float("inf")
    if share < MIN_SHARE:
        return Choice(
            fallback_method,
            fallback_alpha,
            f"BM25 reaches {share:.2f} of dense on {kind} pseudo queries (< {MIN_SHARE:.2f}): the default",
        )
    fusions = [(m, a) for m, a in CANDIDATES if m in WEIGHTED or m == "rrf"]
    # the best; among equal scores the larger dense weight, then the earlier candidate
    best_method, best_alpha = max(
        fusions, key=lambda c: (table[label(*c)][kind], c[1] if c[1] is not None else 0.0, -fusions.index(c))
    )
    if best_alpha is None:
        alpha, moved = DEFAULT_ALPHA, ""
    else:
        alpha = round(min(best_alpha + TOWARD_DENSE, max(a for _, a in fusions if a is not None)), 2)
        moved = f", moved to {alpha:g}"
    best = table[label(best_method, best_alpha)][kind]
    return Choice(
        best_method,
        alpha,
        f"BM25 reaches {share:.2f} of dense on {kind} pseudo queries; best fusion there "
        f"{label(best_method, best_alpha)} ({best:.2f} against dense {dense:.2f}){moved}",
    )
