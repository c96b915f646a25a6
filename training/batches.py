"""What one training step is fed: batch counts, the epoch's order, the precision, padded inputs.

Shared by the trainer, InfoCSE's stage 1 and `embedkit adapt` (which import it, not each other).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from embedkit.encode.batching import pad_encodings
from embedkit.errors import InputError


def steps_per_epoch(num_sentences: int, batch_size: int, ranks: int = 1) -> int:
    """Batches per epoch; a last batch of one sentence is dropped (it has no in-batch negative), and
    so is one with fewer sentences than there are ranks (each rank needs a sentence)."""
    full, rest = divmod(num_sentences, batch_size)
    return full + (1 if rest >= max(2, ranks) else 0)


def epoch_order(num_sentences: int, seed: int, epoch: int) -> np.ndarray:
    """One epoch's shuffled sentence order: a function of (seed, epoch), so resume needs no state."""
    return np.random.default_rng([seed, epoch]).permutation(num_sentences)


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype: bf16 on CUDA where supported, else fp16 (with a GradScaler); None = fp32."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device.type != "cuda":
        raise InputError("fp16 training needs a CUDA device: use precision fp32 or bf16 on CPU")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast(device: torch.device, dtype: torch.dtype | None) -> torch.autocast:
    return torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None)


def pad_batch(
    encodings: Sequence[Any],
    rows: np.ndarray,
    pad_id: int,
    device: torch.device,
    width: int | None = None,
) -> dict[str, torch.Tensor]:
    """Pad the tokenized sentences `rows` to the longest of them (or to `width`), as backbone inputs (B, T).

    Several ranks pad their slices to the longest sentence of the whole batch, so every rank's
    tensors (attention maps included) have the single-process width.
    """
    batch = pad_encodings(encodings, rows, pad_id, width)
    arrays = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "token_type_ids": batch.token_type_ids,
    }
    return {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
