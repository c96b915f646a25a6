"""AMI's attention maps from the layers it reads, with the fused (SDPA) kernel in every other layer.

The fused kernel is registered as `FUSED_ATTENTION`: transformers' SDPA attention, whose padding
mask is always formed. transformers' own `sdpa` first asks whether the batch has any padding
(`attention_mask.all()`, a read of the tensor on the host, which waits for the GPU) to leave the
mask out; the training step reads nothing on the host (`training/step_speed.py`).

miCSE's AMI term (`ami`) compares the attention probabilities of a few upper-middle layers in the two
dropout views. The fused kernels (SDPA, flash) never form those (B, H, T, T) maps, and a backbone
loaded with eager attention forms and returns them in every layer. Here the backbone keeps SDPA, and
only the attention modules of the layers AMI reads compute their attention as Hugging Face's eager
BERT attention does (`eager_attention_with_maps`: scores, mask, softmax, dropout, then the values);
a forward hook keeps each such module's probabilities for the step to read (`AttentionMaps.take`).

What AMI reads is the same quantity as with a whole eager backbone and `output_attentions=True`:
the probabilities *after* attention dropout (the ones the values are multiplied by; dropped entries
are 0, the others scaled by 1 / (1 - p)), which `ami` samples only where both views are above 0.
On the CPU SDPA's math kernel draws its dropout mask as eager attention does, so the other layers
give the eager values too (up to float rounding); the fused CUDA kernels draw their own masks.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

# The name under which `eager_attention_with_maps` is registered in transformers' AttentionInterface.
MAPS_ATTENTION = "embedkit_eager_maps"
# SDPA attention with its mask always formed (no host read of the padding), registered by this name.
FUSED_ATTENTION = "embedkit_sdpa"


def eager_attention_with_maps(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's eager BERT attention, op for op, that also takes SDPA's boolean mask.

    query, key, value: (B, H, T, d); attention_mask: None, an additive float mask or a boolean one
    (True = attend), broadcastable to (B, H, T, T). Returns the output (B, T, H, d) and the
    probabilities after dropout (B, H, T, T).
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, T, T)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            # eager attention's additive mask, in the dtype of the float32 (or float64) embeddings
            dtype = torch.promote_types(query.dtype, torch.float32)
            attention_mask = torch.zeros((), dtype=dtype, device=query.device).masked_fill(
                ~attention_mask, torch.finfo(dtype).min
            )
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def _sdpa_mask_always(*args: Any, **kwargs: Any) -> Any:
    """transformers' SDPA mask, never left out for a batch without padding (no host read)."""
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **{**kwargs, "allow_is_bidirectional_skip": False})


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(MAPS_ATTENTION, eager_attention_with_maps)
    AttentionInterface.register(FUSED_ATTENTION, sdpa_attention_forward)
    AttentionMaskInterface.register(FUSED_ATTENTION, _sdpa_mask_always)


def use_fused_attention(model: nn.Module) -> None:
    """SDPA in every layer of `model` that uses SDPA, its mask always formed (`FUSED_ATTENTION`);
    a model with eager attention keeps it (its mask is always formed)."""
    _register()
    config = getattr(model, "config", None)
    if config is not None and config._attn_implementation == "sdpa":
        config._attn_implementation = FUSED_ATTENTION


def attention_modules(backbone: nn.Module) -> list[nn.Module]:
    """The backbone's self-attention modules, one per layer in order (the modules whose outputs
    Hugging Face records as `attentions`); `ValueError` for a model that names none."""
    # transformers 5.x: a model names the modules whose outputs it records; 4.x models do not
    recorded = getattr(backbone, "_can_record_outputs", None) or {}
    kind = recorded.get("attentions")
    kind = getattr(kind, "target_class", kind)  # an OutputRecorder names its class
    modules = [m for m in backbone.modules() if isinstance(kind, type) and isinstance(m, kind)]
    if not modules or not all(hasattr(m, "config") for m in modules):
        raise ValueError(f"{type(backbone).__name__} names no attention modules for AMI to read")
    return modules


class AttentionMaps:
    """The attention probabilities (B, H, T, T) of `layers` (0-based), kept at each forward pass.

    Those layers' attention modules get a configuration of their own that selects
    `eager_attention_with_maps`; the rest of the backbone keeps its kernel. Copies of the backbone
    made afterwards (a deepcopy keeps hooks) run the same arithmetic but record nothing.

    Example:
        >>> maps = AttentionMaps(backbone, layers=(2, 3))
        >>> out = backbone(**inputs)
        >>> attn = maps.take()  # [(B, H, T, T) of layer 2, of layer 3]
    """

    def __init__(self, backbone: nn.Module, layers: Sequence[int]) -> None:
        _register()
        modules = attention_modules(backbone)
        if not layers or any(not 0 <= j < len(modules) for j in layers):
            raise ValueError(f"AMI layers must be 0-based indices below {len(modules)}, got {tuple(layers)}")
        self.layers = tuple(int(j) for j in layers)
        self._kept: dict[int, torch.Tensor] = {}
        for j in sorted(set(self.layers)):
            module = modules[j]
            module.config = copy.copy(module.config)  # its own: the other layers keep theirs
            module.config._attn_implementation = MAPS_ATTENTION
            module.register_forward_hook(self._keeper(module, j))

    def _keeper(self, target: nn.Module, layer: int) -> Any:
        def keep(module: nn.Module, args: Any, output: Any) -> None:
            # a step's pass (not a no-grad dev evaluation, whose maps nothing reads), not a copy's
            if module is target and torch.is_grad_enabled():
                self._kept[layer] = output[1]

        return keep

    def take(self) -> list[torch.Tensor]:
        """The maps of the last forward pass, in the order of `layers`; forgets them."""
        missing = [j for j in self.layers if j not in self._kept]
        if missing:
            raise RuntimeError(f"no attention maps of layers {missing}: run the backbone first")
        maps = [self._kept[j] for j in self.layers]
        self._kept.clear()
        return maps


__all__ = [
    "FUSED_ATTENTION",
    "MAPS_ATTENTION",
    "AttentionMaps",
    "attention_modules",
    "eager_attention_with_maps",
    "use_fused_attention",
]
