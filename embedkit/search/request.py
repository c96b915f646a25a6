"""What a search asks for: its mode, fusion and depth, and the index's defaults for those not asked.

The one owner of the search modes and of an index's recorded fusion choice (`Calibration`, in
`IndexMeta.fusion`, made by `embedkit.evaluation.fusion_calibration`) and how it becomes the fusion
of a search: `embedkit search`, `/search`, the search page, `eval retrieval`, `adapt` and the Python
API all resolve a `SearchRequest` here (`SearchRequest.resolved`: the user's settings over the index's
recorded choice over the library's defaults) and check their settings here (`check_choices`), so
none of them can differ in a default or in what it accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from embedkit.errors import InputError
from embedkit.search.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS, check_fusion

if TYPE_CHECKING:
    from embedkit.search.hits import Hit

SEARCH_MODES = ("dense", "lexical", "hybrid")
# Each side's candidates before fusion: BEIR's evaluation depth, or k when k is larger.
FUSION_DEPTH = 100

# The re-ranking stage: each query's text and its hits (documents attached), best first, in; the
# hits to return, best first, out. The last stage of `embedkit.search.pipeline.search`.
Reranker = Callable[[Sequence[str], list[list["Hit"]]], list[list["Hit"]]]


@dataclass(frozen=True)
class SearchRequest:
    """One search's settings; None fields take the index's defaults (`resolved`)."""

    k: int = 10  # hits per query
    mode: str | None = None  # dense, lexical or hybrid; None: `default_mode`
    fusion: str | None = None  # prf, zscore, rrf or minmax; None: `fusion_for` (the index's choice)
    alpha: float | None = None  # the dense weight of zscore / minmax and of prf's first ranking
    depth: int | None = None  # candidates each side ranks (None: k, in hybrid mode max(k, FUSION_DEPTH))
    where: str | None = None  # a metadata filter (`embedkit.index.where`), applied in each side
    snippets: bool = False  # give every hit a snippet: matched words highlighted, else its start
    passages: bool = False  # give each hit its best passage (an index of passages)
    # per query, the id of a document it must not find (BEIR's identical ids: evaluation)
    exclude: Sequence[str] | None = None
    rerank: Reranker | None = None  # the last stage, where a re-ranker plugs in (none by default)

    def resolved(self, meta: dict[str, Any], has_lexical: bool, no_lexical: str = "") -> SearchRequest:
        """This request with its mode, fusion and weight filled from the index, and checked:
        a bad value, or lexical and hybrid on an index without a lexical side (`no_lexical`
        says why), is an `InputError` before any work."""
        self.check_types()
        mode = self.mode or default_mode(meta, has_lexical, self.fusion)
        fusion, alpha = fusion_for(meta, self.fusion, self.alpha)
        check_choices(mode, fusion, alpha)
        if mode != "dense" and not has_lexical:
            raise InputError(no_lexical or "this index has no lexical side: search it with --mode dense")
        depth = max(self.k, self.depth or FUSION_DEPTH) if mode == "hybrid" else self.k
        return replace(self, mode=mode, fusion=fusion, alpha=alpha, depth=depth)

    def check_types(self) -> None:
        """An `InputError` naming the setting of a wrong type (a Python caller's `k=2.5`,
        `where=[...]`), before any of them is compared or computed with (`embedkit.arguments`)."""
        from embedkit.arguments import flag, optional_text, optional_weight, whole_number

        whole_number("k", self.k)
        optional_text("mode", self.mode)
        optional_text("fusion", self.fusion)
        optional_weight("alpha", self.alpha)
        if self.depth is not None:
            whole_number("depth", self.depth)
        if self.where is not None and not isinstance(self.where, str):
            raise InputError(f"where must be a filter expression (a string), not {type(self.where).__name__}")
        flag("snippets", self.snippets)
        flag("passages", self.passages)

    def record(self) -> dict[str, Any]:
        """How the search ran, as `embedkit search --json` and `/search` report it: the mode, and
        in hybrid mode the fusion and dense weight."""
        fused = {"fusion": self.fusion, "alpha": self.alpha} if self.mode == "hybrid" else {}
        return {"mode": self.mode, **fused}


def check_choices(mode: str | None, fusion: str | None = None, alpha: float | None = None) -> None:
    """The one check of a search's mode, fusion and dense weight, each None where the index's
    default is left to decide: an `InputError` before an index or a model loads. Every entry point
    (the CLI, the server, the Python API, `eval retrieval`, `adapt`) checks here."""
    if mode is not None and mode not in SEARCH_MODES:
        raise InputError(f"unknown search mode {mode!r}: use {', '.join(SEARCH_MODES)}")
    check_fusion(fusion or DEFAULT_FUSION, DEFAULT_ALPHA if alpha is None else alpha)


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
    # candidate -> kind -> [low, high]: the 95% paired-bootstrap interval of each table entry
    intervals: dict[str, dict[str, list[float]]] = field(default_factory=dict)
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
        """One line: `fusion zscore 0.5 (calibrated on 200 pseudo queries ...): reason`."""
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
    """What a search runs when no mode is asked for: hybrid where the index has a lexical side,
    unless its calibration chose dense and no `fusion` is asked for; else dense."""
    if not has_lexical:
        return "dense"
    return "dense" if fusion is None and recorded_choice(meta)[0] == "dense" else "hybrid"
