"""The calibrated fusion of an index: the candidates, the recorded choice, and the rule that makes it.

No fixed fusion fits every collection: where BM25 is near the model (Cranfield) equal-weight
z-score fusion gains 6 nDCG@10 points over dense, where it is far behind (msmarco-5k, DBpedia) it
costs points and only `prf` at dense weight 0.7 never harms. An index holds what tells these
apart: its own documents. `embedkit.evaluation.calibrate` scores every candidate of `CANDIDATES` on
pseudo queries cut from them; `choose` (the rule of docs/hybrid.md) turns that table into a
`Calibration`, recorded in the index metadata (`IndexMeta.fusion`). `search`, `serve` and
`eval retrieval` read it (`recorded_choice`) unless told otherwise: nothing is computed at search time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from embedkit.errors import InputError
from embedkit.index.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS

# The candidates, as (method, dense weight): the list. "dense" is search without BM25.
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


def label(method: str, alpha: float | None) -> str:
    """A candidate's name in the table: `dense`, `rrf`, `zscore 0.5`."""
    return method if alpha is None else f"{method} {alpha:g}"


@dataclass(frozen=True)
class Calibration:
    """The recorded choice, and the measurements behind it (`IndexMeta.fusion`)."""

    method: str  # "dense" or one of FUSION_METHODS
    alpha: float  # the dense weight (unused by dense and rrf)
    reason: str  # the rule's words: why this candidate
    table: dict[str, dict[str, float]] = field(default_factory=dict)  # candidate -> kind -> nDCG@10 x 100
    queries: dict[str, int] = field(default_factory=dict)  # kind -> pseudo queries scored
    documents: int = 0  # documents searched (the sample)
    count: int = 0  # documents in the index when calibrated (an append recalibrates at REGROW x)
    seconds: float = 0.0
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Calibration:
        """A checked record; an `InputError` saying what is wrong."""
        if not isinstance(data, dict):
            raise InputError("not an object")
        method, alpha = data.get("method"), data.get("alpha")
        if method not in ("dense", *FUSION_METHODS):
            raise InputError(f"unknown method {method!r}")
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0.0 <= alpha <= 1.0:
            raise InputError(f"alpha {alpha!r} is not a weight in [0, 1]")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def describe(self) -> str:
        """One line: `fusion zscore 0.5 (calibrated on 600 pseudo queries ...): reason`."""
        chosen = "dense (no fusion)" if self.method == "dense" else label(self.method, self.alpha)
        asked = sum(self.queries.values())
        if not asked:
            return f"fusion {chosen}: {self.reason}"
        return (
            f"fusion {chosen} (calibrated on {asked} pseudo queries over {self.documents:,} documents "
            f"in {self.seconds:.1f} s): {self.reason}"
        )


def default_choice() -> tuple[str, float]:
    """What an index without a calibration searches with: the never-harm default."""
    return DEFAULT_FUSION, DEFAULT_ALPHA


def recorded_choice(meta: dict[str, Any]) -> tuple[str, float]:
    """(method, dense weight) recorded in an index's metadata, else `default_choice()`."""
    record = meta.get("fusion")
    if not record:
        return default_choice()
    return str(record["method"]), float(record["alpha"])


def fusion_for(
    meta: dict[str, Any], fusion: str | None = None, alpha: float | None = None
) -> tuple[str, float]:
    """The fusion and dense weight of a hybrid search: those asked for, else the recorded choice.

    A fusion asked for without a weight gets `DEFAULT_ALPHA`; a weight asked for without a fusion
    goes with the recorded method. Where the calibration chose dense, an explicit hybrid search
    uses the default fusion.
    """
    if fusion is not None:
        return fusion, DEFAULT_ALPHA if alpha is None else alpha
    method, weight = recorded_choice(meta)
    if method == "dense":
        method, weight = default_choice()
    return method, weight if alpha is None else alpha


def default_mode(meta: dict[str, Any], has_lexical: bool, fusion: str | None = None) -> str:
    """What `search` runs when no mode is asked for: hybrid where the index has a lexical side,
    unless its calibration chose dense and no `fusion` is asked for; else dense."""
    if not has_lexical:
        return "dense"
    return "dense" if fusion is None and recorded_choice(meta)[0] == "dense" else "hybrid"


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
