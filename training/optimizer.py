"""The optimizer of a training step: AdamW, its linear warm-up/decay schedule, and the update."""

from __future__ import annotations

import math

import torch
from torch import nn

from embedkit.training.config import TrainConfig


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


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
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
    model: nn.Module,
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


__all__ = ["lr_factor", "make_optimizer", "make_scheduler", "optimizer_step"]
