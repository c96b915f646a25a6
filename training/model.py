"""The network being trained: backbone, pooling, SimCSE's MLP head, and miCSE's momentum branch.

One step of the objective (miCSE, Klein & Nabi 2023, Eq. 1-5 and Sec. 3.1), composed from the
pure loss functions of `losses` and `ami`:

1. the batch is duplicated, [x; x], and run through the backbone once, so that independent
   dropout masks give the two views E1, E2 (and attentions W1, W2 when AMI is on), as SimCSE;
2. each view is pooled and passed through the MLP head (Linear + Tanh, training only);
3. InfoNCE (tau = 0.05) over in-batch negatives plus the momentum queue; with Matryoshka
   (Kusupati et al. 2022) and prefix weights, also at each smaller prefix of the saved (rotated)
   vectors (`contrastive_terms`);
4. AMI between W1 and W2 (float32), and optionally InforMin-CL's L2 reconstruction term;
5. the momentum encoder embeds x (no grad, its own dropout 0.3, the shared head); after the
   optimizer step it moves by EMA and those keys enter the queue (`after_step`);
6. with `aux_weight` (InfoCSE), lambda x the auxiliary MLM loss, which reaches the encoder only
   through the pooled vectors of both views (`infocse.AuxMLM`).

With several ranks (`distributed`), each runs this step on its slice of the global batch: the views'
vectors and the momentum keys are gathered, the per-sentence terms are each rank's share of the
batch mean, and the loss to backpropagate is scaled so that DDP's average is the single-process
gradient.

The optimizer (AdamW), its linear warm-up/decay schedule and the update are at the end.
"""

from __future__ import annotations

import contextlib
import inspect
import math
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
from embedkit.training import ami, infocse, losses
from embedkit.training.attention_maps import AttentionMaps
from embedkit.training.config import TrainConfig
from embedkit.training.contrastive_terms import contrastive_terms
from embedkit.training.distributed import BatchShard
from embedkit.training.momentum import EmbeddingQueue, MomentumEncoder
from embedkit.training.rotation import Rotation


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
    output: Any = None  # the doubled forward pass (dropout views only): its attentions feed AMI
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
        self.head = MLPHead(self.dim, float(getattr(backbone.config, "initializer_range", 0.02)))
        # Matryoshka starts from the pooled vectors rotated onto their principal axes (`rotation`)
        self.rotation: nn.Module = Rotation(self.dim) if config.rotates else nn.Identity()
        self.uses_token_type_ids = "token_type_ids" in inspect.signature(backbone.forward).parameters
        self.num_layers = int(backbone.config.num_hidden_layers)
        self.ami_layers = config.ami_layers or ami.ami_layers(self.num_layers)
        # Made after the base weights are loaded: the momentum encoder starts as their copy.
        self.momentum: MomentumEncoder | None = None
        if config.uses_queue:
            self.momentum = MomentumEncoder(backbone, config.momentum_decay, config.momentum_dropout)
        if self.momentum is not None:  # it reads no attention maps: the fused kernel, whatever the backbone's
            _set_attention(self.momentum.encoder, "sdpa")
        # AMI's layers form their attention maps, the others keep the fused kernel (`attention_maps`)
        self.attention_maps = AttentionMaps(backbone, self.ami_layers) if config.uses_ami else None
        # where Matryoshka trains prefixes the queue holds each key after the head and as saved
        # (`contrastive_terms`)
        key_dim = self.dim * (2 if config.trains_prefixes else 1)
        self.queue = EmbeddingQueue(key_dim, config.queue_length) if config.uses_queue else None
        self.aux: infocse.AuxMLM | None = None  # InfoCSE's auxiliary MLM network (`from_folder`)
        # Compiled forward passes of the step ("backbone", "momentum": `step_speed.compile_model`); a
        # plain dict, not submodules, so the state dict and checkpoints stay those of the modules.
        self.runners: dict[str, Callable[..., Any]] = {}

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
        if config.uses_aux:
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
        terms = self._terms(views, e1, e2, saved, generator, shard)
        zero = torch.zeros((), device=e1.device)
        loss = sum(terms.values(), zero)
        reported = {k: v.detach() for k, v in terms.items()}
        if shard.world_size > 1:
            shares = [k for k in ("ami", "aux_mlm") if k in reported]  # per-sentence terms: sum the shares
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
            return _Views(
                self.head(anchor_vectors), self.head(positive_vectors), positive, anchor_vectors, anchor,
                saved=saved,
            )
        inputs = self.model_inputs(batch)
        size = inputs["input_ids"].shape[0]
        # (2B, T): one forward pass gives two views with independent dropout masks
        doubled = {k: torch.cat([v, v]) for k, v in inputs.items()}
        out = self._run("backbone", **doubled)
        sentences = pool(out.last_hidden_state, doubled["attention_mask"], self.pooling)  # (2B, D)
        pooled = self.head(sentences)
        saved = self._saved(sentences[:size], sentences[size:])
        return _Views(pooled[:size], pooled[size:], inputs, sentences, doubled, out, saved)  # (B, D) views

    def _momentum_keys(self, key_inputs: dict[str, torch.Tensor], shard: BatchShard) -> torch.Tensor | None:
        """The momentum encoder's keys (whole batch, B, D) for the queue; None without one. With
        Matryoshka (B, 2D): after the head, then as saved, for the prefix terms' negatives."""
        if self.momentum is None:
            return None
        with torch.no_grad():
            hidden = self._run("momentum", **key_inputs)  # (B, T, D)
            pooled = pool(hidden, key_inputs["attention_mask"], self.pooling)
            keys = self.head(pooled)
            if self.config.trains_prefixes:
                keys = torch.cat([keys, self.rotation(pooled)], dim=-1)
            return shard.gather(keys.float())  # every rank's keys, so every rank holds the same queue

    def _terms(
        self,
        views: _Views,
        e1: torch.Tensor,
        e2: torch.Tensor,
        saved: tuple[torch.Tensor, torch.Tensor] | None,
        generator: torch.Generator | None,
        shard: BatchShard,
    ) -> dict[str, torch.Tensor]:
        """Each weighted loss term; `e1`, `e2` (and `saved`) are the views of the whole batch."""
        config = self.config
        queued = self.queue.keys() if self.queue is not None and len(self.queue) else None
        terms = contrastive_terms(e1, e2, saved, queued, config)
        out = views.output
        if self.attention_maps is not None and out is not None:
            size = views.e1.shape[0]
            maps = self.attention_maps.take()  # per AMI layer (2B, H, T, T)
            attn1 = [a[:size] for a in maps]  # (B, H, T, T)
            attn2 = [a[size:] for a in maps]
            ami_sum, ami_count = ami.ami_sum_and_count(
                attn1,
                attn2,
                views.key_inputs["attention_mask"],
                weight=config.ami_weight,
                layers=range(len(maps)),
                num_samples=config.ami_samples,
                generator=generator,
                shard=shard,
            )
            # this rank's share of the batch mean (the whole mean for one rank)
            terms["ami"] = ami_sum / shard.all_sum(ami_count).clamp(min=1.0)
        if config.reconstruction_weight > 0:
            terms["reconstruction"] = config.reconstruction_weight * losses.reconstruction_loss(e1, e2)
        if self.aux is not None:  # InfoCSE: the vectors before the MLP head, both views
            aux_shard = shard if out is None else shard.doubled()
            mlm_sum, mlm_count = self.aux.sum_and_count(views.aux_vectors, views.aux_inputs, aux_shard)
            terms["aux_mlm"] = config.aux_weight * (mlm_sum / shard.all_sum(mlm_count).clamp(min=1))
        return terms

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
        return (self.rotation(v1), self.rotation(v2)) if self.config.trains_prefixes else None

    def rotation_weight(self) -> torch.Tensor | None:
        """The saved Dense module's weight: the rotation, where the run has one."""
        return self.rotation.weight if isinstance(self.rotation, Rotation) else None

    def after_step(self, keys: torch.Tensor | None) -> None:
        """After the optimizer step: EMA-update the momentum encoder, then enqueue this step's keys."""
        if self.momentum is None or self.queue is None or keys is None:
            return
        self.momentum.update(self.backbone)
        self.queue.enqueue(keys)


def _set_attention(module: nn.Module, implementation: str) -> None:
    setter = getattr(module, "set_attn_implementation", None)
    if setter is not None:
        with contextlib.suppress(ValueError, ImportError):
            setter(implementation)


# --- the optimizer -------------------------------------------------------------------------------


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Linear warm-up then linear decay to 0 (Hugging Face's `get_linear_schedule_with_warmup`)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def make_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """`lr_factor` with ceil(total * warmup_ratio) warm-up steps (Hugging Face's rounding)."""
    warmup = math.ceil(total_steps * warmup_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, warmup))


def make_optimizer(model: ContrastiveModel, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the backbone and head; no weight decay on biases and LayerNorm (HF Trainer).

    On CUDA the fused implementation: one kernel for all parameters instead of a few per tensor.
    """
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    no_decay = [p for n, p in params if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n]
    decay = [p for n, p in params if not (n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n)]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = all(p.is_cuda for _, p in params) or None  # None: torch's default (foreach) elsewhere
    return torch.optim.AdamW(groups, lr=config.learning_rate, fused=fused)


def optimizer_step(
    loss: torch.Tensor,
    model: ContrastiveModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler | None,
    max_grad_norm: float,
) -> None:
    """Backward, clip, step, schedule (through the GradScaler under fp16).

    Under fp16 the scaler skips a step whose gradients overflowed (and lowers its scale); the
    schedule then does not advance either, as in Hugging Face's Trainer.
    """
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    stepped = True
    if scaler is not None:
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stepped = scaler.get_scale() >= scale
    else:
        optimizer.step()
    if stepped:
        scheduler.step()
