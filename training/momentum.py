"""The momentum encoder and the queue of its keys: miCSE's extra negatives (Sec. 2.3, after MoCo).

A slowly moving copy of the online backbone (an exponential moving average of its weights) embeds
each batch once more; those keys enter a FIFO queue and serve as negatives in
`embedkit.training.losses.info_nce` for the following steps. Pooling and the MLP head are applied by
the caller; the head is shared with the online network, not averaged.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch
from torch import nn

# Modules whose `p` is a dropout probability.
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
# Float attributes that some attention implementations read instead of an nn.Dropout's `p`.
_DROPOUT_ATTRIBUTES = ("dropout_prob", "attention_dropout", "dropout_rate")
# Config fields that hold dropout probabilities (BERT, DistilBERT): kept in step for the record.
_DROPOUT_CONFIG_FIELDS = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dropout",
    "attention_dropout",
)


@torch.no_grad()
def ema_update(target: nn.Module, online: nn.Module, decay: float = 0.995) -> None:
    """Move `target` towards `online` in place: ``t = decay * t + (1 - decay) * o`` per parameter.

    The momentum update of MoCo (He et al. 2020, Eq. 2) as miCSE uses it (Sec. 2.3). Buffers (such
    as position ids) are copied, not averaged. Both modules must have the same parameter names and
    shapes (the target is a copy of the online module).
    """
    _check_decay(decay)
    pairs = match_tensors(target, online)
    sources = [
        o.to(dtype=t.dtype, device=t.device) for t, o in zip(pairs.targets, pairs.sources, strict=True)
    ]
    _apply_ema(pairs.targets, sources, pairs.target_buffers, pairs.source_buffers, decay)


class TensorPairs(NamedTuple):
    """A target module's parameters and buffers beside the online module's of the same names."""

    targets: list[torch.Tensor]
    sources: list[torch.Tensor]
    target_buffers: list[torch.Tensor]
    source_buffers: list[torch.Tensor]

    @property
    def same_kind(self) -> bool:
        """Every parameter pair on one device with one dtype: the online tensors serve as they are
        (buffers are copied, which converts)."""
        pairs = zip(self.targets, self.sources, strict=True)
        return all(t.dtype == o.dtype and t.device == o.device for t, o in pairs)


def match_tensors(target: nn.Module, online: nn.Module) -> TensorPairs:
    """Pair the parameters (and buffers) of `target` and `online` by name; `ValueError` on a mismatch."""
    target_params = dict(target.named_parameters())
    online_params = dict(online.named_parameters())
    if target_params.keys() != online_params.keys():
        raise ValueError(
            "ema_update needs two modules with the same parameters (the target is a copy of the online)"
        )
    for name, t in target_params.items():
        o = online_params[name]
        if t.shape != o.shape:
            raise ValueError(
                f"parameter {name} has shape {tuple(t.shape)} in the target but {tuple(o.shape)} online"
            )
    online_buffers = dict(online.named_buffers())
    buffers = [(t, online_buffers[name]) for name, t in target.named_buffers() if name in online_buffers]
    return TensorPairs(
        list(target_params.values()),
        [online_params[name].detach() for name in target_params],
        [t for t, _ in buffers],
        [o for _, o in buffers],
    )


def _apply_ema(
    targets: list[torch.Tensor],
    sources: list[torch.Tensor],
    target_buffers: list[torch.Tensor],
    source_buffers: list[torch.Tensor],
    decay: float,
) -> None:
    # lerp: t + (1 - decay) * (o - t), the same average; the foreach forms are a few fused kernels
    # on a GPU instead of one launch per tensor.
    torch._foreach_lerp_(targets, sources, 1.0 - decay)
    if target_buffers:
        torch._foreach_copy_(target_buffers, source_buffers)


def _check_decay(decay: float) -> None:
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"the momentum decay must lie in [0, 1], got {decay}")


def set_dropout(module: nn.Module, p: float) -> None:
    """Set every dropout probability in `module` to `p`: nn.Dropout modules and attention dropout.

    Hugging Face BERT and DistilBERT attention (eager and SDPA) read the probability from the
    attention module's ``dropout.p``, which the nn.Dropout loop covers; float attributes such as
    ``attention_dropout`` (used by some other architectures) and the config's dropout fields are set
    too. The attributes are probed on each module and config: transformers (4.x, 5.x) names them
    per architecture, and a module without them is left as it is.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"a dropout probability must lie in [0, 1), got {p}")
    for sub in module.modules():
        if isinstance(sub, _DROPOUT_MODULES):
            sub.p = p
        for name in _DROPOUT_ATTRIBUTES:
            if isinstance(getattr(sub, name, None), float):
                setattr(sub, name, p)
        config = getattr(sub, "config", None)
        for name in _DROPOUT_CONFIG_FIELDS:
            if config is not None and isinstance(getattr(config, name, None), float):
                setattr(config, name, p)


class MomentumEncoder(nn.Module):
    """A frozen copy of the online backbone, moved by `update` (EMA), always with dropout active.

    Construct it after the base weights are loaded: it deep-copies the backbone as it is then.
    Its parameters never require grad; `forward` runs under no_grad and returns the last hidden
    state (B, T, D). It stays in train mode (``.eval()`` on a parent leaves it training) because its
    dropout, ``dropout`` = 0.3 by default, is part of how the keys are made.

    Example:
        >>> momentum = MomentumEncoder(backbone, decay=0.995, dropout=0.3)
        >>> hidden = momentum(input_ids=ids, attention_mask=mask)  # (B, T, D), no grad
        >>> momentum.update(backbone)  # after the optimizer step
    """

    def __init__(self, online_backbone: nn.Module, decay: float = 0.995, dropout: float = 0.3) -> None:
        super().__init__()
        _check_decay(decay)
        self.decay = decay
        self.dropout_p = dropout
        self.encoder = copy.deepcopy(online_backbone)
        self.encoder.requires_grad_(False)
        set_dropout(self.encoder, dropout)
        self.encoder.train()
        self._pairs: tuple[nn.Module, TensorPairs] | None = None  # (online module, its matched tensors)

    def train(self, mode: bool = True) -> MomentumEncoder:
        """Keep the copy in train mode whatever the parent asks: its dropout is always on."""
        super().train(mode)
        self.encoder.train(True)
        return self

    @torch.no_grad()
    def update(self, online_backbone: nn.Module) -> None:
        """One EMA step towards the online backbone (call it after each optimizer step): `ema_update`.

        The two modules' tensors are matched by name on the first call and kept, so that a step is
        two fused foreach calls; walking the module trees and checking ~100 parameters each step costs
        more host time than the update itself where a GPU runs it. The online weights are the same
        tensors from step to step (the optimizer and `load_state_dict` write into them in place).
        """
        if self._pairs is None or self._pairs[0] is not online_backbone:
            pairs = match_tensors(self.encoder, online_backbone)
            if not pairs.same_kind:  # a copy per step is needed: nothing to keep
                ema_update(self.encoder, online_backbone, self.decay)
                return
            self._pairs = (online_backbone, pairs)
        pairs = self._pairs[1]
        _apply_ema(pairs.targets, pairs.sources, pairs.target_buffers, pairs.source_buffers, self.decay)

    @torch.no_grad()
    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        """(B, T, D) last hidden state of the momentum copy, without grad."""
        return self.encoder(**inputs).last_hidden_state


class EmbeddingQueue:
    """FIFO of detached keys (B, D) from the momentum encoder, the extra negatives of `info_nce`.

    A ring buffer of ``size`` rows; `keys` returns only the filled rows, oldest first. The buffer
    lives on the device of the keys last enqueued and stores float32.

    Example:
        >>> queue = EmbeddingQueue(dim=384, size=384)
        >>> loss = info_nce(e1, e2, queue=queue.keys())
        >>> queue.enqueue(momentum_keys)
    """

    def __init__(self, dim: int, size: int = 384) -> None:
        if dim < 1 or size < 0:
            raise ValueError(f"a queue needs dim >= 1 and size >= 0, got dim={dim}, size={size}")
        self.dim = int(dim)
        self.size = int(size)
        self._buffer = torch.zeros(self.size, self.dim)
        self._next = 0  # the row the next key is written to (the oldest row once full)
        self._filled = 0

    def __len__(self) -> int:
        return self._filled

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Append (B, D) keys, dropping the oldest first; of a batch above `size`, keep the newest."""
        if keys.ndim != 2 or keys.shape[1] != self.dim:
            raise ValueError(f"queue keys must be (B, {self.dim}), got {tuple(keys.shape)}")
        if self.size == 0 or keys.shape[0] == 0:
            return
        keys = keys.detach()[-self.size :].to(dtype=torch.float32)
        if self._buffer.device != keys.device:
            self._buffer = self._buffer.to(keys.device)
        rows = (self._next + torch.arange(keys.shape[0], device=keys.device)) % self.size
        self._buffer.index_copy_(0, rows, keys)
        self._next = (self._next + keys.shape[0]) % self.size
        self._filled = min(self.size, self._filled + keys.shape[0])

    def keys(self) -> torch.Tensor:
        """(Q_filled, D) the queued keys in insertion order, oldest first."""
        if self._filled < self.size:
            return self._buffer[: self._filled]
        return torch.roll(self._buffer, shifts=-self._next, dims=0)

    def to(self, device: torch.device | str) -> EmbeddingQueue:
        self._buffer = self._buffer.to(device)
        return self

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """Plain tensors and ints, loadable with ``torch.load(..., weights_only=True)``."""
        return {
            "buffer": self._buffer.detach().cpu().clone(),
            "next": self._next,
            "filled": self._filled,
            "size": self.size,
            "dim": self.dim,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor | int]) -> None:
        """Restore a queue saved by `state_dict`; its size and dim must match this queue's."""
        if int(state.get("size", -1)) != self.size or int(state.get("dim", -1)) != self.dim:
            raise ValueError(
                f"the saved queue is size {state.get('size')} x dim {state.get('dim')}, "
                f"but this run uses size {self.size} x dim {self.dim}"
            )
        buffer = state["buffer"]
        if not isinstance(buffer, torch.Tensor) or tuple(buffer.shape) != (self.size, self.dim):
            raise ValueError(f"the saved queue buffer must be a ({self.size}, {self.dim}) tensor")
        filled, nxt = int(state["filled"]), int(state["next"])
        if not (0 <= filled <= self.size and 0 <= nxt < max(self.size, 1)):
            raise ValueError(f"the saved queue position is out of range (filled={filled}, next={nxt})")
        self._buffer = buffer.to(device=self._buffer.device, dtype=torch.float32).clone()
        self._filled, self._next = filled, nxt
