"""The settings of `embedkit adapt`: one dataclass, each default with where it comes from (no torch)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from embedkit.errors import InputError
from embedkit.search.request import check_choices
from embedkit.training.adapt.queries import QUERY_KINDS
from embedkit.training.adapt.signals import LABEL_FREE
from embedkit.training.config import PRECISIONS

# method -> weight of the in-batch InfoNCE term beside the listwise KL term
ADAPT_METHODS: dict[str, float] = {
    "kl+nce": 1.0,  # listwise KL (RocketQAv2) + InfoNCE over in-batch positives and hard negatives
    "kl": 0.0,  # listwise KL alone
}


# The selection rule (signals.py; measured by benchmarks/adapt_signals.py, docs/training.md "Which step adapt
# keeps"): of the label-free signals, word-drop alone rose more on the runs that gained judged nDCG@10
# (best gains +2.55 to +3.59 on Cranfield) than on those that lost it (at most +1.77 on msmarco-5k);
# the margin is the largest, in half points, that still kept a step on every Cranfield run.
DEFAULT_SELECT = "word-drop"
DEFAULT_MARGIN = 0.025  # 2.5 points of nDCG@10
DEFAULT_MIN_BASE_OVERLAP = 0.0


@dataclass
class AdaptConfig:
    """Hyper-parameters of one `embedkit adapt` run (JSON-serialisable; recorded in embedkit.json)."""

    base_model: str | None = None  # the index's model (its torch folder); another copy of it may be named
    method: str = "kl+nce"  # ADAPT_METHODS; see benchmarks/README.md "adapt" for the measured variants
    queries: str = "ict,title,terms"  # pseudo-query kinds (queries.QUERY_KINDS), comma-separated
    max_queries: int = 4000  # training queries drawn from all that the documents give (steps x batch: 4800)
    dev_queries: int = 200  # held-out queries (their documents give none for training): Cranfield's 225
    fusion: str = "prf"  # the teacher: the index's hybrid ranking, with `embedkit search`'s default fusion
    steps: int = 150  # optimizer steps: a budget 2 CPU cores run in minutes on a 1,400-document index
    batch_size: int = 32  # queries per step
    learning_rate: float = 1e-5  # the pilots: 2e-5 hurt a supervised base; see benchmarks/README.md
    warmup_ratio: float = 0.1  # linear warm-up share, as `embedkit train`
    weight_decay: float = 0.01  # AdamW, as `embedkit train`
    max_grad_norm: float = 1.0  # gradient clipping, as `embedkit train`
    temperature: float = 0.05  # tau of the student's cosines, in both terms: SimCSE's
    teacher_temperature: float = 0.05  # tau of the teacher's scores (prf scores are cosines too)
    source_margin: float = 0.05  # the source document's teacher score above the best other candidate
    query_max_length: int = 64  # tokens of a pseudo query (ICT sentences rarely pass 40)
    positive_max_length: int = 128  # tokens of a query's positive passage, encoded every step
    train_passages: bool = False  # gradient through the positives' vectors too (GPL trains both sides)
    eval_steps: int = 50  # dev score, and the document vectors the loss uses refreshed, every N steps
    seed: int = 42  # query sampling, batches and dropout
    device: str = "auto"  # auto, cpu, cuda
    precision: str = "auto"  # bf16 (or fp16) on CUDA, fp32 on CPU, as `embedkit train`
    dev_retrieval: str | None = None  # BEIR folder of judged queries: select on their nDCG@10
    select: str | None = None  # signals.SIGNALS; None: "judged" with dev_retrieval, else DEFAULT_SELECT
    margin: float = DEFAULT_MARGIN  # gain over the base the selected score needs (docs/training.md)
    min_base_overlap: float = DEFAULT_MIN_BASE_OVERLAP  # label-free selection: base top-10 share kept
    force: bool = False  # keep the best step even when it does not clear the margin

    # Fields that may differ when a run is resumed: they change no number the run computes.
    RESUMABLE_CHANGES: typing.ClassVar[frozenset[str]] = frozenset({"device"})

    @property
    def selection(self) -> str:
        """The signal a step is selected on."""
        if self.select is not None:
            return self.select
        return "judged" if self.dev_retrieval else DEFAULT_SELECT

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k.strip() for k in self.queries.split(",") if k.strip())

    @property
    def nce_weight(self) -> float:
        return ADAPT_METHODS[self.method]

    def validate(self) -> AdaptConfig:
        """Raise `InputError` for a setting no run could use; return self."""
        if self.method not in ADAPT_METHODS:
            raise InputError(f"unknown adapt method {self.method!r}: use {', '.join(ADAPT_METHODS)}")
        unknown = [k for k in self.kinds if k not in QUERY_KINDS]
        if unknown or not self.kinds:
            raise InputError(
                f"unknown pseudo-query kind {self.queries!r}: use a comma list of {', '.join(QUERY_KINDS)}"
            )
        if self.select is not None and self.select not in (*LABEL_FREE, "judged"):
            raise InputError(f"unknown --select {self.select!r}: use {', '.join((*LABEL_FREE, 'judged'))}")
        if self.selection == "judged" and not self.dev_retrieval:
            raise InputError("--select judged needs judged queries: --dev-retrieval BEIR_FOLDER")
        if not 0 <= self.margin < 1 or not 0 <= self.min_base_overlap <= 1:
            raise InputError("--margin must be in [0, 1) and the base overlap in [0, 1] (nDCG@10 and shares)")
        check_choices(None, self.fusion, None)  # the teacher's fusion, checked as every search's
        if self.precision not in PRECISIONS:
            raise InputError(f"unknown precision {self.precision!r}: use {', '.join(PRECISIONS)}")
        positive = (
            "steps",
            "batch_size",
            "max_queries",
            "query_max_length",
            "positive_max_length",
            "eval_steps",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise InputError("batch_size must be at least 2: in-batch negatives need a second query")
        if self.dev_queries < 0 or self.learning_rate <= 0:
            raise InputError("dev_queries must be >= 0 and learning_rate > 0")
        if self.temperature <= 0 or self.teacher_temperature <= 0:
            raise InputError("temperatures must be positive")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


__all__ = ["ADAPT_METHODS", "AdaptConfig"]
