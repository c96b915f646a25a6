"""The training objective as a list of weighted terms: a method is the terms it sums, not a branch.

Each term is a small frozen dataclass: its weight and settings, the inputs it reads of one step
(`StepTensors`: the two views, the queue's keys, the attention maps, ...) and a call that returns
its named, weighted values, computed by the pure loss functions of `losses` and `ami`. The model only
embeds: it computes the inputs that some term reads (`Objective.reads`) and sums what the terms
return. `Objective.from_config` is the one place that turns a `TrainConfig` into terms:

- every method: `InfoNCE` (SimCSE Eq. 1; with the momentum queue's keys as extra negatives, miCSE Eq. 1-2);
- the momentum queue (moco-simcse, micse): not a term but where `InfoNCE`'s extra negatives come
  from (`Objective.momentum`, MoCo's queue: `momentum`);
- Matryoshka with weighted prefixes: `MatryoshkaInfoNCE`, and `MatryoshkaSimilarity`;
- AMI (ami-simcse, micse): `AttentionMI` (miCSE Eq. 3-5);
- InforMin-CL's L2 term: `Reconstruction`;
- InfoCSE's auxiliary MLM (infocse, or any method with `aux_mlm_weight`): `AuxiliaryMLM`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch

from embedkit.training import ami, losses

if TYPE_CHECKING:
    from embedkit.training.config import TrainConfig
    from embedkit.training.distributed import BatchShard


@dataclass(frozen=True)
class StepTensors:
    """What one step's forward passes made, as the terms read it (B sentences of the whole batch)."""

    e1: torch.Tensor  # (B, D) the first view after the head (the anchors)
    e2: torch.Tensor  # (B, D) the second view after the head (the positives)
    shard: BatchShard  # this rank's rows of the global batch (the whole batch for one process)
    queued: torch.Tensor | None = None  # (Q, D) the momentum queue's keys after the head, or None
    saved: tuple[torch.Tensor, torch.Tensor] | None = None  # both views as saved (B, D): Matryoshka
    queued_saved: torch.Tensor | None = None  # (Q, D) the queue's keys as saved
    # AMI: each AMI layer's attention probabilities (B_rank, H, T, T) of each view
    maps: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    attention_mask: torch.Tensor | None = None  # (B_rank, T) this rank's real tokens
    generator: torch.Generator | None = None  # AMI's sampling RNG
    aux: tuple[torch.Tensor, torch.Tensor] | None = None  # the auxiliary MLM's (loss sum, count), this rank


class Term(Protocol):
    """One weighted part of the loss: `reads` names the `StepTensors` fields it needs beyond the
    views; the values named in `shares` are this rank's share of the batch mean (per-sentence terms)."""

    reads: ClassVar[frozenset[str]]
    shares: ClassVar[frozenset[str]]

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]: ...


@dataclass(frozen=True)
class InfoNCE:
    """`info_nce`: weight x InfoNCE of the views after the head over the in-batch negatives, plus
    the momentum queue's keys where the method has one (SimCSE Eq. 1; miCSE Eq. 1-2, MoCo's queue).
    The weight is 1, or Matryoshka's c_D of the whole vector."""

    weight: float = 1.0
    temperature: float = 0.05  # tau: SimCSE Sec. 3, miCSE Sec. 4
    reads: ClassVar[frozenset[str]] = frozenset({"queued"})
    shares: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        loss = losses.info_nce(x.e1, x.e2, queue=x.queued, temperature=self.temperature)
        return {"info_nce": self.weight * loss}


@dataclass(frozen=True)
class MatryoshkaInfoNCE:
    """`info_nce@m`: c_m x InfoNCE at each smaller prefix m of the views as saved (rotated, no
    head), against the queue's keys as saved (Kusupati et al. 2022, Eq. 1; `losses.matryoshka_info_nce`)."""

    dims: tuple[int, ...]  # the trained smaller sizes (c_m > 0)
    weights: tuple[float, ...]  # their c_m
    temperature: float = 0.05
    reads: ClassVar[frozenset[str]] = frozenset({"saved", "queued_saved"})
    shares: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        s1, s2 = _saved(x)
        keys = x.queued_saved
        per_size = losses.matryoshka_info_nce(s1, s2, self.dims, self.weights, keys, self.temperature)
        return dict(zip((f"info_nce@{m}" for m in self.dims), per_size.unbind(), strict=True))


@dataclass(frozen=True)
class MatryoshkaSimilarity:
    """`similarity@m`: how far each smaller prefix's cosine similarities are from the whole vector's,
    over the positives and the queued keys as saved (Matryoshka-Adaptor's L_pair, Yoon et al. 2024;
    `losses.matryoshka_similarity`)."""

    dims: tuple[int, ...]  # every size, largest (the reference) first
    weight: float
    reads: ClassVar[frozenset[str]] = frozenset({"saved", "queued_saved"})
    shares: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        s1, s2 = _saved(x)
        keys = s2 if x.queued_saved is None else torch.cat([s2, x.queued_saved.to(s2.dtype)])
        scaled = [self.weight] * len(self.dims)  # the first, the reference's, is unused
        similarity = losses.matryoshka_similarity(s1, keys, self.dims, scaled)  # (M - 1,)
        return dict(zip((f"similarity@{m}" for m in self.dims[1:]), similarity.unbind(), strict=True))


@dataclass(frozen=True)
class AttentionMI:
    """`ami`: -lambda x the mean mutual information between the two dropout views' attention
    maps over the sampled slices of the AMI layers (miCSE Eq. 3-5, Algorithm 1; `ami`)."""

    weight: float = 2.5e-3  # lambda of Eq. 5 (TrainConfig.ami_weight)
    samples: int = 150  # entries sampled per slice: the authors' code
    reads: ClassVar[frozenset[str]] = frozenset({"maps", "attention_mask", "generator"})
    shares: ClassVar[frozenset[str]] = frozenset({"ami"})

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        if x.maps is None or x.attention_mask is None:
            raise ValueError("AMI needs the attention maps of two dropout views of the same tokens")
        attn1, attn2 = x.maps
        total, count = ami.ami_sum_and_count(
            attn1,
            attn2,
            x.attention_mask,
            weight=self.weight,
            layers=range(len(attn1)),
            num_samples=self.samples,
            generator=x.generator,
            shard=x.shard,
        )
        # this rank's share of the batch mean (the whole mean for one rank)
        return {"ami": total / x.shard.all_sum(count).clamp(min=1.0)}


@dataclass(frozen=True)
class Reconstruction:
    """`reconstruction`: weight x the mean squared L2 distance between the two views after the
    head: InforMin-CL's reconstruction term, the identity as its decoder (`losses.reconstruction_loss`)."""

    weight: float
    reads: ClassVar[frozenset[str]] = frozenset()
    shares: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        return {"reconstruction": self.weight * losses.reconstruction_loss(x.e1, x.e2)}


@dataclass(frozen=True)
class AuxiliaryMLM:
    """`aux_mlm`: lambda x InfoCSE's auxiliary MLM loss, the masked tokens predicted through the
    sentence vector alone (Wu et al. 2022, the joint loss of Sec. 3; `infocse.AuxMLM` computes its
    summed cross-entropy and count over this rank's rows)."""

    weight: float
    reads: ClassVar[frozenset[str]] = frozenset({"aux"})
    shares: ClassVar[frozenset[str]] = frozenset({"aux_mlm"})

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        if x.aux is None:
            raise ValueError("the auxiliary MLM term needs the auxiliary network's loss")
        total, count = x.aux
        return {"aux_mlm": self.weight * (total / x.shard.all_sum(count).clamp(min=1))}


def _saved(x: StepTensors) -> tuple[torch.Tensor, torch.Tensor]:
    if x.saved is None:
        raise ValueError("Matryoshka's prefix terms need the views as saved (before the head)")
    return x.saved


@dataclass(frozen=True)
class Objective:
    """A method: the weighted terms it sums, in order, and whether a momentum queue adds negatives."""

    terms: tuple[Term, ...]
    momentum: bool = False  # a momentum encoder embeds each batch; its keys queue as negatives

    @classmethod
    def from_config(cls, config: TrainConfig) -> Objective:
        """`config.method`'s terms with the config's weights (the one place that reads which)."""
        dims, weights = config.matryoshka
        whole = weights[0] if weights else 1.0  # c_D of the whole vector, 1 without Matryoshka
        terms: list[Term] = [InfoNCE(whole, config.temperature)]
        if config.trains_prefixes:
            trained = [(m, w) for m, w in zip(dims[1:], weights[1:], strict=True) if w > 0]
            if trained:
                sizes, size_weights = zip(*trained, strict=True)
                terms.append(MatryoshkaInfoNCE(sizes, size_weights, config.temperature))
            if config.matryoshka_similarity > 0:
                terms.append(MatryoshkaSimilarity(dims, config.matryoshka_similarity))
        if config.uses_ami:
            terms.append(AttentionMI(config.ami_weight, config.ami_samples))
        if config.reconstruction_weight > 0:
            terms.append(Reconstruction(config.reconstruction_weight))
        if config.uses_aux:
            terms.append(AuxiliaryMLM(config.aux_weight))
        return cls(tuple(terms), momentum=config.uses_queue)

    def reads(self, name: str) -> bool:
        """Some term reads the `StepTensors` field `name`."""
        return any(name in term.reads for term in self.terms)

    def __call__(self, x: StepTensors) -> dict[str, torch.Tensor]:
        """Every term's named, weighted values, in the order of the terms."""
        values: dict[str, torch.Tensor] = {}
        for term in self.terms:
            values |= term(x)
        return values

    def shares(self, values: dict[str, torch.Tensor]) -> list[str]:
        """The names among `values` that are a rank's share of a batch mean (summed over ranks)."""
        shared = set().union(*(term.shares for term in self.terms))
        return [name for name in values if name in shared]


__all__ = [
    "AttentionMI",
    "AuxiliaryMLM",
    "InfoNCE",
    "MatryoshkaInfoNCE",
    "MatryoshkaSimilarity",
    "Objective",
    "Reconstruction",
    "StepTensors",
    "Term",
]
