"""The training configuration: every hyper-parameter of `embedkit train` in one dataclass.

Each default says where it comes from. The experiment runner passes `KEY=VALUE` overrides
(`TrainConfig.from_overrides`), so anything worth tuning is a field here, not a constant in the
trainer. Four methods are miCSE's Table 3 ablations (Klein & Nabi, ACL 2023); `infocse` is SimCSE
plus InfoCSE's auxiliary MLM term (Wu et al., EMNLP 2022 Findings), which `aux_mlm_weight` adds to
any method (`training/infocse.py`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from embedkit.errors import InputError
from embedkit.training.views import VIEWS

# method -> (attention mutual information term, momentum-encoder queue of negatives)
METHODS: dict[str, tuple[bool, bool]] = {
    "simcse": (False, False),  # InfoNCE over in-batch negatives only (SimCSE, Gao et al. 2021)
    "ami-simcse": (True, False),  # + AMI (miCSE Table 3)
    "moco-simcse": (False, True),  # + momentum queue of negatives (miCSE Table 3)
    "micse": (True, True),  # both: the full miCSE objective (Eq. 5)
    "infocse": (False, False),  # SimCSE + InfoCSE's auxiliary MLM term (Wu et al. 2022; AUX_METHODS)
}
AUX_METHODS = frozenset({"infocse"})  # methods whose auxiliary MLM term is on by default
INFOCSE_WEIGHT = 1e-5  # lambda of InfoCSE's joint loss: the paper's Table 8 and the authors' scripts
POOLINGS = ("auto", "mean", "cls")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# torch.compile's modes, off, or auto: reduce-overhead on CUDA, off elsewhere (`step_speed.compile_mode`)
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")
QUEUE_BATCHES = 6  # the queue's default length in batches: miCSE's 384 keys / its batch of 64
ATTENTIONS = ("auto", "eager", "sdpa")


@dataclass
class TrainConfig:
    """Hyper-parameters of one training run (all serialisable to JSON, all overridable)."""

    # --- model and objective ---
    base_model: str | None = None  # a local HF folder; None = bundled all-MiniLM-L6-v2 (the default base)
    method: str = "micse"  # miCSE Table 3: micse | simcse | ami-simcse | moco-simcse; or infocse
    pooling: str = "auto"  # auto = the base folder's 1_Pooling (mean for MiniLM), else cls (SimCSE)
    temperature: float = 0.05  # tau of InfoNCE: SimCSE Sec. 3 and miCSE Sec. 4
    ami_weight: float = 2.5e-3  # lambda of Eq. 5: this project's default (see training/ami.py)
    ami_layers: tuple[int, ...] | None = None  # None = ami.ami_layers(depth): MiniLM -> (4, 5)
    ami_samples: int = 150  # attention entries sampled per slice: the miCSE authors' code
    momentum_decay: float = 0.995  # EMA of the momentum encoder: miCSE Sec. 3.1
    momentum_dropout: float = 0.3  # dropout inside the momentum encoder: miCSE Sec. 3.1
    # FIFO of momentum keys used as negatives. None = QUEUE_BATCHES x batch_size: miCSE's 384 keys at
    # its batch of 64 (Sec. 3.1), so a larger batch keeps as many past batches as negatives
    queue_size: int | None = None
    reconstruction_weight: float = 0.0  # InforMin-CL's L2 term between the views; off as in miCSE
    # --- InfoCSE's auxiliary MLM network (training/infocse.py, training/aux_stage1.py) ---
    # lambda x MLM loss; None = INFOCSE_WEIGHT (1e-5) for infocse, off for the others; > 0 adds the term
    # to any method (e.g. micse + aux); 0 with infocse computes the term and weights it 0.
    aux_mlm_weight: float | None = None
    # Mask rate: 0.4, the authors' BERT-base script (infocse-bert-base.sh; 0.3 in their BERT-large one);
    # tokens are masked 80/10/10 ([MASK]/random/kept) as BERT (Devlin et al. 2019, Sec. 3.1).
    aux_mask_rate: float = 0.4
    # Frozen lower layers that extract the token features: None = half the depth, InfoCSE's 6 of
    # BERT-base's 12 (its scripts' skip_from 6), so 3 of all-MiniLM-L6-v2's 6.
    aux_lower_layers: int | None = None
    aux_layers: int = 2  # extra transformer layers on top: InfoCSE's (and Condenser's) 2
    # Stage 1 trains the extra layers and the MLM head with MLM alone (encoder frozen). InfoCSE starts
    # from Condenser's pre-trained head (Gao & Callan 2021); here a short run on the training corpus
    # (plus aux_stage1_corpus), cached by base, data and these settings. 50 steps: this project's CPU
    # budget (about as long as the contrastive epoch at n = 4,000); lr 1e-4: Condenser's. 0 = none.
    aux_stage1_steps: int = 50
    aux_stage1_lr: float = 1e-4
    aux_stage1_corpus: str | None = None  # extra sentences for stage 1 only (a file or BEIR folder)
    aux_from: str | None = None  # a stage-1 folder to reuse instead of training or the cache
    # "auto" = sdpa: the fused kernel in every layer but those AMI reads, which form their maps
    # (`attention_maps`); "eager" = eager attention in every layer (as before the fused kernel)
    attn_implementation: str = "auto"
    # --- Matryoshka Representation Learning (Kusupati et al. 2022, NeurIPS; docs/dimensions.md) ---
    # Prefix sizes whose first m dimensions must work alone, e.g. (384, 256, 128, 64), any order, the
    # base model's dimension included: the vectors are rotated onto their principal axes and the
    # sizes recorded for `index --dim`. None = off.
    matryoshka_dims: tuple[int, ...] | None = None
    # c_m of each size (the paper's Eq. 1, `training.terms`): a smaller size's trains the
    # backbone with InfoNCE on that prefix; 0 = not trained. None = 1 for the whole vector, 0 for each
    # prefix, so the model trains exactly as without Matryoshka: on five Cranfield seeds the paper's
    # 1 each cost 0.93 nDCG@10 at 384 and kept 48.36 at 128, the default 0 and 49.32.
    matryoshka_weights: tuple[float, ...] | None = None
    # The similarity-preserving term at each smaller prefix (`losses.matryoshka_similarity`, after
    # Matryoshka-Adaptor's L_pair, Yoon et al. 2024); 0 = none: no gain on both collections.
    matryoshka_similarity: float = 0.0
    # Documents of the corpus (a seeded sample) whose base-model vectors' principal axes the vectors
    # are rotated onto before the first step (`training.rotation`; a saved Dense module). Own
    # documents, not Wikipedia's: the bundled model's 128-d prefix kept 0.990 of 384 on Cranfield
    # (0.919 unrotated, 0.925 on Wikipedia's axes). Base-model axes, not the trained model's: 0.973
    # to 0.985 against 0.969 to 0.975. 56 s on 2 CPU cores. 0 = none (the MRL paper's; needs weights).
    matryoshka_rotation_docs: int = 1000

    # --- optimisation ---
    learning_rate: float = 3e-5  # miCSE Sec. 4 and SimCSE's BERT-base setting
    batch_size: int = 64  # miCSE Sec. 4 and SimCSE
    max_seq_length: int = 32  # training truncation: miCSE Sec. 4 and SimCSE
    epochs: int = 1  # the training budget is the smaller of epochs and max_steps ...
    # ... 63 steps at lr 3e-5 on 4,000 Cranfield sentences hurt all-MiniLM-L6-v2's in-domain
    # retrieval in 6 of 6 runs, while 16 steps did no harm (3 seeds: nDCG@10 50.36 and 51.10 at
    # 1,000 and 4,000 sentences against the base's 50.62; benchmarks/README.md "Experiments"),
    # so 16 is the default. None = epochs only.
    max_steps: int | None = 16
    warmup_ratio: float = 0.1  # share of steps with a linear warm-up, then linear decay (BERT's schedule)
    weight_decay: float = 0.0  # Hugging Face Trainer's default, which SimCSE trains with
    max_grad_norm: float = 1.0  # Hugging Face Trainer's default clipping, as SimCSE
    seed: int = 42  # SimCSE's default seed; also fixes the data order and dropout masks

    # --- data ---
    # dropout: one sentence twice, two dropout masks (the paper). crop / ict: two texts of one
    # document (training/views.py); AMI needs two views of the same tokens, so it is off there.
    views: str = "dropout"
    positive_max_length: int = 128  # truncation of crop/ict positives (passages): see benchmarks/
    column: str | None = None  # the text column of a CSV/TSV corpus (default `text`)
    split_sentences: bool = False  # split documents into sentences before de-duplication
    limit: int | None = None  # few-shot protocol: draw this many sentences ...
    limit_seed: int = 0  # ... with this seed (a reproducible subset)

    # --- runtime ---
    device: str = "auto"  # auto | cpu | cuda: CUDA when torch sees one
    precision: str = "auto"  # auto = bf16 autocast on CUDA if supported, else fp16 + GradScaler; fp32 on CPU
    # Pad every batch to max_seq_length, one shape for the whole run: None = on CUDA (compiled graphs and
    # the allocator reuse one shape), off on CPU, where padding is arithmetic (training/step_speed.py)
    pad_to_max_length: bool | None = None
    # torch.compile of the step's forward passes and loss (reduce-overhead: CUDA graphs, at the fixed
    # shapes); auto = reduce-overhead on CUDA, off on the CPU (where compiling takes minutes and the
    # step is bound by arithmetic). On CUDA by default as the step is launch-bound, but not yet
    # measured on a GPU (benchmarks/train_step.py --compile): `off` runs the step uncompiled.
    compile: str = "auto"
    # With several ranks (torchrun): seconds a rank waits for the others at a collective, rank 0's dev
    # evaluations and checkpoints included, before the job fails instead of hanging (torch's 30 min).
    dist_timeout: float = 1800.0

    # --- model selection, logging, checkpoints ---
    dev_sts: str | None = None  # a sentence1/sentence2/score TSV scored by Spearman (SimCSE: STS-B dev)
    dev_pseudo: int = 0  # N > 0: hold N pseudo queries out of the corpus, select on their nDCG@10
    # A BEIR folder of the user's own judged queries: select on nDCG@10, and keep the base model
    # when no checkpoint beats it (20-50 judged queries suffice; see docs/training-results.md)
    dev_retrieval: str | None = None
    eval_steps: int = 125  # evaluate the dev criterion every N steps and at the end: SimCSE's interval
    eval_batch_size: int = 128  # batch size when embedding the dev sentences (speed only)
    save_steps: int = 125  # write a resumable checkpoint every N steps and at the end
    # Read the loss terms and append them to metrics.jsonl every N steps. A read waits for the GPU, so
    # None = 1 on CPU (free there), step_speed.CUDA_LOG_STEPS (50) on CUDA
    log_steps: int | None = None

    # Fields that may differ when a run is resumed: they change no number the run computes (compile:
    # how the kernels run, not what they compute; a run from before its default was auto says off).
    RESUMABLE_CHANGES: typing.ClassVar[frozenset[str]] = frozenset(
        {"device", "eval_batch_size", "save_steps", "log_steps", "dist_timeout", "compile"}
    )

    @property
    def uses_ami(self) -> bool:
        """AMI compares the attention maps of two views of the same tokens: dropout views only."""
        return METHODS[self.method][0] and self.views == "dropout"

    @property
    def ami_dropped(self) -> bool:
        """The method asks for AMI, but the views are two different texts: it is off."""
        return METHODS[self.method][0] and self.views != "dropout"

    @property
    def uses_queue(self) -> bool:
        return METHODS[self.method][1]

    @property
    def queue_length(self) -> int:
        """The queue's length: `queue_size`, else QUEUE_BATCHES x batch_size (384 at batch 64)."""
        return self.queue_size if self.queue_size is not None else QUEUE_BATCHES * self.batch_size

    @property
    def aux_weight(self) -> float:
        """The effective lambda of the auxiliary MLM term."""
        if self.aux_mlm_weight is not None:
            return self.aux_mlm_weight
        return INFOCSE_WEIGHT if self.method in AUX_METHODS else 0.0

    @property
    def uses_aux(self) -> bool:
        return self.method in AUX_METHODS or self.aux_weight > 0

    @property
    def rotates(self) -> bool:
        """Matryoshka starts from the vectors rotated onto their principal axes (`training.rotation`)."""
        return bool(self.matryoshka_dims) and self.matryoshka_rotation_docs > 0

    @property
    def trains_prefixes(self) -> bool:
        """A term at some smaller prefix trains the model (a positive c_m, or the similarity term)."""
        dims, weights = self.matryoshka
        return len(dims) > 1 and (any(w > 0 for w in weights[1:]) or self.matryoshka_similarity > 0)

    @property
    def matryoshka(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """The prefix sizes, largest first, and their weights; both empty when Matryoshka is off."""
        if not self.matryoshka_dims:
            return (), ()
        whole = max(self.matryoshka_dims)
        weights = self.matryoshka_weights or tuple(float(m == whole) for m in self.matryoshka_dims)
        pairs = sorted(zip(self.matryoshka_dims, weights, strict=True), reverse=True)
        return tuple(m for m, _ in pairs), tuple(float(w) for _, w in pairs)

    def check_matryoshka(self, dim: int) -> None:
        """`InputError` unless the prefix sizes fit a model of `dim` dimensions and include it."""
        if not self.matryoshka_dims:
            return
        too_large = [m for m in self.matryoshka_dims if m > dim]
        if too_large:
            raise InputError(
                f"matryoshka_dims {_listed(too_large)}: larger than the base model's {dim} dimensions"
            )
        if dim not in self.matryoshka_dims:
            raise InputError(
                f"matryoshka_dims must include {dim}, the base model's dimension, so the whole vector is "
                f"trained too: e.g. {_listed((dim, *self.matryoshka_dims))}"
            )

    def validate(self) -> TrainConfig:
        """Raise `InputError` naming the first bad field; return self."""
        _one_of("method", self.method, METHODS)
        _one_of("views", self.views, VIEWS)
        _one_of("pooling", self.pooling, POOLINGS)
        _one_of("precision", self.precision, PRECISIONS)
        _one_of("attn_implementation", self.attn_implementation, ATTENTIONS)
        _one_of("compile", self.compile, COMPILE_MODES)
        for name in ("learning_rate", "temperature", "momentum_decay", "dist_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{name} must be a positive finite number, got {value}")
        if self.momentum_decay >= 1:
            raise InputError(f"momentum_decay must be below 1, got {self.momentum_decay}")
        for name in ("ami_weight", "reconstruction_weight", "weight_decay", "max_grad_norm", "warmup_ratio"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"{name} must be a finite number >= 0, got {value}")
        if self.aux_mlm_weight is not None and not (
            math.isfinite(self.aux_mlm_weight) and self.aux_mlm_weight >= 0
        ):
            raise InputError(f"aux_mlm_weight must be a finite number >= 0, got {self.aux_mlm_weight}")
        if not 0 < self.aux_mask_rate < 1:
            raise InputError(f"aux_mask_rate must be in (0, 1), got {self.aux_mask_rate}")
        if not (math.isfinite(self.aux_stage1_lr) and self.aux_stage1_lr > 0):
            raise InputError(f"aux_stage1_lr must be a positive finite number, got {self.aux_stage1_lr}")
        if self.aux_lower_layers is not None and self.aux_lower_layers < 1:
            raise InputError(f"aux_lower_layers must be at least 1, got {self.aux_lower_layers}")
        if not 0 <= self.momentum_dropout < 1 or self.warmup_ratio >= 1:
            raise InputError("momentum_dropout and warmup_ratio must be in [0, 1)")
        minimums = {"batch_size": 2, "max_seq_length": 3, "epochs": 1, "ami_samples": 3}
        minimums |= {"positive_max_length": 3}
        minimums |= {"eval_steps": 1, "eval_batch_size": 1, "save_steps": 1}
        minimums |= {"dev_pseudo": 0, "aux_layers": 1, "aux_stage1_steps": 0}
        for name, minimum in minimums.items():
            if getattr(self, name) < minimum:
                raise InputError(f"{name} must be at least {minimum}, got {getattr(self, name)}")
        for name in ("max_steps", "limit", "log_steps", "queue_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, got {value}")
        self._validate_matryoshka()
        if sum(bool(x) for x in (self.dev_sts, self.dev_pseudo, self.dev_retrieval)) > 1:
            raise InputError(
                "give one of dev_sts, dev_pseudo and dev_retrieval: one criterion selects the checkpoint"
            )
        return self

    def _validate_matryoshka(self) -> None:
        dims, weights = self.matryoshka_dims, self.matryoshka_weights
        similarity = self.matryoshka_similarity
        if not (math.isfinite(similarity) and similarity >= 0):
            raise InputError(f"matryoshka_similarity must be a finite number of at least 0, got {similarity}")
        rotation = self.matryoshka_rotation_docs
        if isinstance(rotation, bool) or not isinstance(rotation, int) or rotation < 0:
            raise InputError(
                f"matryoshka_rotation_docs must be a whole number of at least 0, got {rotation!r}"
            )
        if dims is None:
            if weights is not None:
                raise InputError("matryoshka_weights needs matryoshka_dims, the sizes they weight")
            return
        if not dims or any(m < 1 for m in dims):
            raise InputError(
                f"matryoshka_dims must be sizes of at least 1, e.g. 384,256,128,64; got {_listed(dims)}"
            )
        if len(set(dims)) != len(dims):
            raise InputError(f"matryoshka_dims lists a size twice: {_listed(dims)}")
        if weights is not None:
            if len(weights) != len(dims):
                raise InputError(
                    f"matryoshka_weights needs one weight per size of matryoshka_dims ({len(dims)}), "
                    f"got {len(weights)}"
                )
            if not all(math.isfinite(w) and w >= 0 for w in weights):
                raise InputError(
                    f"matryoshka_weights must be finite numbers of at least 0, got {_listed(weights)}"
                )
            if weights[dims.index(max(dims))] <= 0:
                raise InputError(
                    f"matryoshka_weights: the whole vector's ({max(dims)}) must be above 0, "
                    "or the method's own loss is off"
                )
        if len(dims) > 1 and rotation == 0 and not self.trains_prefixes:
            raise InputError(
                "matryoshka_rotation_docs=0 with no prefix weighted leaves the prefixes as they are: "
                "give --matryoshka-weights (the paper's: 1 each) or keep the rotation"
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values; `queue_size` as the length the run uses (`queue_length`)."""
        data = dataclasses.asdict(self)
        data["queue_size"] = self.queue_length
        for name in _TUPLE_FIELDS:
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Rebuild a config saved by `to_dict` (unknown keys are an `InputError`)."""
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise InputError(f"unknown training settings: {', '.join(unknown)}")
        values = dict(data)
        for name, kind in _TUPLE_FIELDS.items():
            if values.get(name) is not None:
                values[name] = tuple(kind(x) for x in values[name])
        return cls(**values)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def with_overrides(self, overrides: Mapping[str, str] | Iterable[str]) -> TrainConfig:
        """A copy with `KEY=VALUE` strings (or a KEY -> VALUE mapping) parsed by each field's type.

        `none` sets an optional field to None; `ami_layers=4,5` gives a tuple (`matryoshka_weights=1,0.5`
        one of floats); booleans accept true/false/1/0/yes/no.
        """
        pairs = overrides.items() if isinstance(overrides, Mapping) else (_split_pair(o) for o in overrides)
        hints = typing.get_type_hints(type(self))
        names = [f.name for f in dataclasses.fields(self)]
        changes: dict[str, Any] = {}
        for key, raw in pairs:
            name = key.strip().replace("-", "_")
            if name not in names:
                raise InputError(f"unknown training setting {key!r} (known: {', '.join(names)})")
            changes[name] = _parse_value(name, str(raw), hints[name])
        return self.replace(**changes)


# the fields that hold a tuple (a JSON list), and the type of their items
_TUPLE_FIELDS: dict[str, type] = {"ami_layers": int, "matryoshka_dims": int, "matryoshka_weights": float}


def _listed(values: Iterable[object]) -> str:
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def _one_of(name: str, value: str, allowed: Iterable[str]) -> None:
    if value not in allowed:
        raise InputError(f"unknown {name} {value!r}: use one of {', '.join(allowed)}")


def _split_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _parse_value(name: str, raw: str, hint: Any) -> Any:
    """Parse `raw` as the type `hint` (int, float, bool, str, tuple[int, ...], or X | None)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if raw.strip().lower() in ("none", "null", ""):
            return None
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    try:
        if hint is bool:
            lowered = raw.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return lowered in ("true", "1", "yes")
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if typing.get_origin(hint) is tuple:
            return tuple(args[0](x) for x in raw.split(",") if x.strip())
        return raw
    except ValueError:
        kind = getattr(hint, "__name__", str(hint))
        if typing.get_origin(hint) is tuple:
            kind = f"comma-separated list of {args[0].__name__}s"
        raise InputError(f"{name}={raw!r} is not a valid {kind}") from None


__all__ = [
    "ATTENTIONS",
    "AUX_METHODS",
    "COMPILE_MODES",
    "QUEUE_BATCHES",
    "INFOCSE_WEIGHT",
    "METHODS",
    "POOLINGS",
    "PRECISIONS",
    "TrainConfig",
]
