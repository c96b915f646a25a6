"""The network being trained: backbone, pooling, SimCSE's MLP head, and miCSE's momentum branch.

The model embeds; the objective is the method's list of weighted terms (`terms.Objective`), and
the model computes what those terms read (`terms.StepTensors`). One step (miCSE, Klein & Nabi 2023,
Eq. 1-5 and Sec. 3.1):

1. the batch is duplicated, [x; x], and run through the backbone once, so that independent
   dropout masks give the two views E1, E2, as SimCSE; where a term reads attention maps (AMI),
   the layers it reads form them (`attention_maps`), every other layer keeps the fused kernel;
2. each view is pooled and passed through the MLP head (Linear + Tanh, training only); where a
   term reads the vectors as saved (Matryoshka's prefixes), they are pooled and rotated too;
3. where the method has a momentum encoder, it embeds x (no grad, its own dropout 0.3, the shared
   head): after the optimizer step it moves by EMA and those keys enter the queue (`after_step`),
   the extra negatives of the next steps' InfoNCE;
4. where a term reads it, InfoCSE's auxiliary network predicts masked tokens through the pooled
   vectors of both views (`infocse.AuxMLM`);
5. the terms' weighted values are summed.

With several ranks (`distributed`), each runs this step on its slice of the global batch: the views'
vectors and the momentum keys are gathered, the per-sentence terms are each rank's share of the
batch mean, and the loss to backpropagate is scaled so that DDP's average is the single-process
gradient. The optimizer and the update are in `optimizer`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn

from embedkit.encode.st_modules import pooling_from_folder, read_st_modules
from embedkit.encode.torch_backend import load_backbone
from embedkit.encode.torch_head import pool
from embedkit.errors import InputError
from embedkit.training import ami, infocse
from embedkit.training.attention_maps import AttentionMaps, use_fused_attention
from embedkit.training.config import TrainConfig
from embedkit.training.distributed import BatchShard
from embedkit.training.momentum import EmbeddingQueue, MomentumEncoder
from embedkit.training.rotation import Rotation
from embedkit.training.terms import Objective, StepTensors


class MLPHead(nn.Module):
    """SimCSE's training-only head: Linear(hidden, hidden) + Tanh on the pooled vector.

    Initialised as SimCSE's `MLPLayer` ends up after `init_weights`: weights ~ N(0, 0.02), bias 0.
    """

    def __init__(self, dim: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


@dataclass
class StepOutput:
    """The loss terms of one step and the momentum keys to enqueue after it."""

    loss: torch.Tensor  # what backward() runs on: the total, or with N ranks N x this rank's share
    terms: dict[str, torch.Tensor]  # each weighted term of the whole batch, detached (info_nce, ami, ...)
    keys: torch.Tensor | None  # (B, D) momentum keys of the whole batch ((B, 2D) training prefixes), or None
    total: torch.Tensor  # the sum of `terms`: the loss of the whole batch, detached


@dataclass
class _Views:
    """One batch's two views after the head, and what the other terms read of their forward pass."""

    e1: torch.Tensor  # (B, D) the first view (the anchor's)
    e2: torch.Tensor  # (B, D) the second view (the positive's)
    key_inputs: dict[str, torch.Tensor]  # what the momentum encoder embeds: the texts, or the positives
    aux_vectors: torch.Tensor  # what InfoCSE's auxiliary network reconstructs from (before the head)
    aux_inputs: dict[str, torch.Tensor]
    doubled: bool  # one forward pass of [x; x] (dropout views): its attention maps feed AMI
    saved: tuple[torch.Tensor, torch.Tensor] | None = None  # Matryoshka: both views as saved (B, D)


def resolve_pooling(pooling: str, base_path: Path) -> str:
    """`auto` takes the base folder's own pooling (`1_Pooling/config.json`), else cls (SimCSE).

    Training trains the Transformer and saves it with mean or cls pooling: a base whose pipeline
    holds Dense modules, or pools otherwise, is refused rather than saved without its head.
    """
    modules = read_st_modules(base_path, 0)
    if modules.dense:
        raise InputError(
            f"{base_path / 'modules.json'}: the base model has a Dense module; training keeps only the "
            "Transformer and its pooling, so it would drop it. Train from the model without its Dense head"
        )
    if pooling == "auto":
        pooling = pooling_from_folder(base_path) or "cls"
        if pooling not in ("mean", "cls"):
            raise InputError(
                f"the base model pools with {pooling!r}; training uses mean or cls: "
                "pass --pooling mean or cls"
            )
    return pooling


class ContrastiveModel(nn.Module):
    """The online backbone with pooling and the MLP head, plus the momentum encoder and queue."""

    def __init__(self, backbone: nn.Module, pooling: str, config: TrainConfig) -> None:
        super().__init__()
        self.backbone = backbone
        self.pooling = pooling
        self.config = config
        self.dim = int(backbone.config.hidden_size)
        config.check_matryoshka(self.dim)
        self.objective = Objective.from_config(config)
        # transformers' configs (4.x, 5.x) mostly have `initializer_range`; 0.02 is BERT's where not
        self.head = MLPHead(self.dim, float(getattr(backbone.config, "initializer_range", 0.02)))
        # Matryoshka starts from the pooled vectors rotated onto their principal axes (`rotation`)
        self.rotation: nn.Module = Rotation(self.dim) if config.rotates else nn.Identity()
        self.uses_token_type_ids = "token_type_ids" in inspect.signature(backbone.forward).parameters
        self.num_layers = int(backbone.config.num_hidden_layers)
        self.ami_layers = config.ami_layers or ami.ami_layers(self.num_layers)
        # Made after the base weights are loaded: the momentum encoder starts as their copy.
        self.momentum: MomentumEncoder | None = None
        if self.objective.momentum:
            self.momentum = MomentumEncoder(backbone, config.momentum_decay, config.momentum_dropout)
            _set_attention(self.momentum.encoder, "sdpa")  # it reads no maps: the fused kernel
            use_fused_attention(self.momentum.encoder)
        use_fused_attention(backbone)
        # the layers whose maps a term reads form them, the others keep the fused kernel
        reads_maps = self.objective.reads("maps")
        self.attention_maps = AttentionMaps(backbone, self.ami_layers) if reads_maps else None
        # where a term reads the keys as saved, the queue holds each key after the head and as saved
        self.saves_keys = self.objective.reads("queued_saved")
        key_dim = self.dim * (2 if self.saves_keys else 1)
        self.queue = EmbeddingQueue(key_dim, config.queue_length) if self.objective.momentum else None
        self.aux: infocse.AuxMLM | None = None  # InfoCSE's auxiliary MLM network (`from_folder`)
        # Compiled parts of the step ("backbone", "momentum", "objective": `step_speed.compile_model`);
        # a plain dict, not submodules, so the state dict and checkpoints stay those of the modules.
        self.runners: dict[str, Callable[..., Any]] = {}
        # On CUDA the momentum forward's own stream (`step_speed.compile_model`): it reads neither
        # view, so it runs beside the loss and the backward pass; None: in order, on the step's.
        self.momentum_stream: torch.cuda.Stream | None = None

    @classmethod
    def from_folder(cls, path: Path, config: TrainConfig) -> ContrastiveModel:
        """Load the base backbone (the fused attention kernel unless `attn_implementation` says
        eager) and build the model."""
        attention = "sdpa" if config.attn_implementation == "auto" else config.attn_implementation
        try:
            backbone = load_backbone(path, attn_implementation=attention)
        except SafetensorError as exc:  # a damaged weights file is bad input, not a crash
            raise InputError(f"cannot load a model from {path}: {exc}") from None
        model = cls(backbone, resolve_pooling(config.pooling, path), config)
        if model.objective.reads("aux"):
            model.aux = infocse.build_aux(backbone, path, config)
        return model

    def to(self, *args: object, **kwargs: object) -> ContrastiveModel:  # type: ignore[override]
        super().to(*args, **kwargs)
        if self.queue is not None:
            self.queue.to(next(self.parameters()).device)
        return self

    def model_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The backbone's keyword arguments (drops token_type_ids for models without them)."""
        names = ("input_ids", "attention_mask", "token_type_ids")[: 3 if self.uses_token_type_ids else 2]
        return {k: batch[k] for k in names if k in batch}

    def sentence_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Inference vectors (B, D): backbone, pooling, rotation, no head (under no_grad, eval mode)."""
        inputs = self.model_inputs(batch)
        hidden = self.backbone(**inputs).last_hidden_state
        return self.rotation(pool(hidden, inputs["attention_mask"], self.pooling))

    def forward(
        self, batch: dict[str, Any], generator: torch.Generator | None, shard: BatchShard | None = None
    ) -> dict[str, Any]:
        """`step`'s output as a dict (`StepOutput(**out)`), for DistributedDataParallel.

        DDP runs a wrapped module through its forward and finds the loss among the tensors of the
        output to hook its gradient synchronisation in; a dataclass would hide them.
        """
        return dict(vars(self.step(batch, generator, shard)))

    def step(
        self, batch: dict[str, Any], generator: torch.Generator | None, shard: BatchShard | None = None
    ) -> StepOutput:
        """The miCSE objective on one batch; run it in train mode, under autocast if any.

        `batch` is the backbone inputs (B, T) of one text per example, whose two views differ by
        their dropout masks (the paper), or `{"anchor": ..., "positive": ...}` for two texts per
        example (the document views of `training.views`); the momentum keys then come from the
        positives, as MoCo and Contriever take them. With several ranks, `batch` is this rank's
        slice of the global batch that `shard` describes (see `distributed`).
        """
        views = self._views(batch)
        shard = shard or BatchShard.whole(views.e1.shape[0])
        keys = self._momentum_keys(views.key_inputs, shard)
        e1, e2, saved = views.e1, views.e2, views.saved
        if shard.world_size > 1:  # the negatives of the whole batch; the gradient flows through ours
            parts = [e1, e2, *(saved or ())]
            e1, e2, *rest = shard.gather_with_grad(torch.cat(parts, dim=-1)).chunk(len(parts), dim=-1)
            saved = (rest[0], rest[1]) if rest else None
        objective = self.runners.get("objective", self.objective)  # compiled where `runners` has it
        terms = objective(self._step_tensors(views, e1, e2, saved, generator, shard))
        zero = torch.zeros((), device=e1.device)
        loss = sum(terms.values(), zero)
        reported = {k: v.detach() for k, v in terms.items()}
        if shard.world_size > 1:
            shares = self.objective.shares(reported)  # per-sentence terms: sum the ranks' shares
            if shares:
                summed = shard.all_sum(torch.stack([reported[k] for k in shares]))
                reported.update(zip(shares, summed, strict=True))
            # DDP averages the ranks' gradients, while the batch gradient is their sum
            loss = loss * shard.world_size
        return StepOutput(loss, reported, keys, sum(reported.values(), zero))

    def _views(self, batch: dict[str, Any]) -> _Views:
        """The two views of every example after the head: two dropout masks of one text in one
        forward pass, or the anchor and positive texts."""
        if "positive" in batch:
            anchor, positive = self.model_inputs(batch["anchor"]), self.model_inputs(batch["positive"])
            anchor_vectors = self._sentence_vectors(anchor)  # (B, D), before the head
            positive_vectors = self._sentence_vectors(positive)
            saved = self._saved(anchor_vectors, positive_vectors)
            # the momentum keys come from the positives; InfoCSE reconstructs the anchors
            head1, head2 = self.head(anchor_vectors), self.head(positive_vectors)
            return _Views(head1, head2, positive, anchor_vectors, anchor, doubled=False, saved=saved)
        inputs = self.model_inputs(batch)
        size = inputs["input_ids"].shape[0]
        # (2B, T): one forward pass gives two views with independent dropout masks
        doubled = {k: torch.cat([v, v]) for k, v in inputs.items()}
        out = self._run("backbone", **doubled)
        sentences = pool(out.last_hidden_state, doubled["attention_mask"], self.pooling)  # (2B, D)
        pooled = self.head(sentences)
        saved = self._saved(sentences[:size], sentences[size:])
        return _Views(pooled[:size], pooled[size:], inputs, sentences, doubled, True, saved)  # (B, D) views

    def _momentum_keys(self, key_inputs: dict[str, torch.Tensor], shard: BatchShard) -> torch.Tensor | None:
        """The momentum encoder's keys (whole batch, B, D) for the queue; None without one. With
        Matryoshka (B, 2D): after the head, then as saved, for the prefix terms' negatives. On the
        side stream where there is one; `after_step` waits for it before the keys are enqueued."""
        if self.momentum is None:
            return None
        stream = self.momentum_stream
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())  # the batch and the last EMA update
            for tensor in key_inputs.values():  # made on the step's stream, read on this one
                tensor.record_stream(stream)
        with torch.no_grad(), torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            hidden = self._run("momentum", **key_inputs)  # (B, T, D)
            pooled = pool(hidden, key_inputs["attention_mask"], self.pooling)
            keys = self.head(pooled)
            if self.saves_keys:
                keys = torch.cat([keys, self.rotation(pooled)], dim=-1)
            keys = shard.gather(keys.float())  # every rank's keys, so every rank holds the same queue
        if stream is not None:
            keys.record_stream(torch.cuda.current_stream())  # made on the side stream, read on the step's
        return keys

    def _step_tensors(
        self,
        views: _Views,
        e1: torch.Tensor,
        e2: torch.Tensor,
        saved: tuple[torch.Tensor, torch.Tensor] | None,
        generator: torch.Generator | None,
        shard: BatchShard,
    ) -> StepTensors:
        """What the terms read; `e1`, `e2` (and `saved`) are the views of the whole batch."""
        queued = self.queue.keys() if self.queue is not None and len(self.queue) else None
        queued_saved = None
        if queued is not None and self.saves_keys:  # (Q, 2D): after the head, then as saved
            queued, queued_saved = queued[:, : self.dim], queued[:, self.dim :]
        maps = None
        if self.attention_maps is not None and views.doubled:
            size = views.e1.shape[0]
            taken = self.attention_maps.take()  # per AMI layer (2B, H, T, T)
            maps = ([a[:size] for a in taken], [a[size:] for a in taken])  # (B, H, T, T) per view
        aux = None
        if self.aux is not None:  # InfoCSE: the vectors before the MLP head, both views
            aux_shard = shard.doubled() if views.doubled else shard
            aux = self.aux.sum_and_count(views.aux_vectors, views.aux_inputs, aux_shard)
        mask = views.key_inputs["attention_mask"]
        return StepTensors(e1, e2, shard, queued, saved, queued_saved, maps, mask, generator, aux)

    def _run(self, name: str, **inputs: Any) -> Any:
        """The step's forward pass of the module `name`, compiled where `runners` has it."""
        return self.runners.get(name, getattr(self, name))(**inputs)

    def _sentence_vectors(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors (B, D) of one text per example, before the head; dropout on in training."""
        hidden = self._run("backbone", **inputs).last_hidden_state
        return pool(hidden, inputs["attention_mask"], self.pooling)

    def _saved(self, v1: torch.Tensor, v2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Both views as the model folder saves them (pooled, then rotated), which Matryoshka's prefix
        terms read; None where no prefix term is trained."""
        return (self.rotation(v1), self.rotation(v2)) if self.objective.reads("saved") else None

    def rotation_weight(self) -> torch.Tensor | None:
        """The saved Dense module's weight: the rotation, where the run has one."""
        return self.rotation.weight if isinstance(self.rotation, Rotation) else None

    def after_step(self, keys: torch.Tensor | None) -> None:
        """After the optimizer step: EMA-update the momentum encoder, then enqueue this step's keys."""
        if self.momentum is None or self.queue is None or keys is None:
            return
        if self.momentum_stream is not None:  # its forward has read the weights the EMA moves
            torch.cuda.current_stream().wait_stream(self.momentum_stream)
        self.momentum.update(self.backbone)
        self.queue.enqueue(keys)


def _set_attention(module: nn.Module, implementation: str) -> None:
    setter = getattr(module, "set_attn_implementation", None)  # transformers >= 4.48 (5.x has it)
    if setter is not None:
        with contextlib.suppress(ValueError, ImportError):
            setter(implementation)
