"""Fewer dimensions from the same vectors: the first N of each, renormalized.

A model trained with Matryoshka Representation Learning (Kusupati et al., NeurIPS 2022;
`embedkit train --matryoshka`) keeps most of its quality in every prefix it was trained at
(`ModelSpec.matryoshka_dims`); any other model can be truncated the same way, at a larger loss.
The prefix is renormalized, so inner products stay cosine similarities. numpy only.
"""

from __future__ import annotations

import numpy as np

from embedkit.errors import InputError


def truncate_vectors(vectors: np.ndarray, dim: int) -> np.ndarray:
    """The first `dim` columns of (n, D) `vectors` (or of one (D,) vector), each row L2-normalized.

    A row whose prefix is all zeros stays zeros. Returns float32, a new array.
    """
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim not in (1, 2):
        raise InputError(f"vectors must be (n, D) or (D,), got shape {array.shape}")
    full = array.shape[-1]
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 1 <= dim <= full:
        raise InputError(f"cannot keep {dim!r} dimensions of {full}-d vectors: use 1 to {full}")
    prefix = array[..., :dim]
    norms = np.linalg.norm(prefix, axis=-1, keepdims=True)
    cut: np.ndarray = np.divide(prefix, norms, out=np.zeros_like(prefix), where=norms > 0)
    return cut


__all__ = ["truncate_vectors"]
