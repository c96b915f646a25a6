"""Matryoshka's starting point: the sentence vectors rotated onto their principal axes over the corpus.

A model spreads its vectors' energy over its dimensions in no particular order, so the first m of
them keep less than m dimensions could: all-MiniLM-L6-v2 cut to 128 keeps 0.919 of its 384-d
nDCG@10 on Cranfield. Rotated onto the eigenvectors of the second-moment matrix of its vectors of
the user's own documents, largest eigenvalue first, each prefix holds as much of the vectors as m
dimensions can (PCA without centering: the energy about the origin is what cosine search and a
renormalized prefix see). The Matryoshka loss (Kusupati et al. 2022) then trains each prefix from
there.

The rotation is orthogonal, so the whole vector's cosine similarities are unchanged: at full size
the model searches as it did. It stays fixed during training (a buffer: checkpoints carry it) and
is saved as a sentence-transformers Dense module (no bias, identity activation) between the
pooling and the normalization, which sentence-transformers, the ONNX export and every embedkit
encoder run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from embedkit.errors import InputError


def principal_axes(vectors: np.ndarray) -> np.ndarray:
    """(D, D) float32 whose rows are the unit eigenvectors of `vectors.T @ vectors`, the largest
    eigenvalue first: a rotation (orthogonal) in `nn.Linear`'s layout, `x @ axes.T`.

    Each row's sign makes its largest component (by magnitude) positive, so the same vectors give the
    same rotation. Fewer rows than D leave the last axes any orthonormal completion.
    """
    array = np.asarray(vectors, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 1 or not np.isfinite(array).all():
        raise InputError(f"principal axes need finite (n, D) vectors, got shape {array.shape}")
    eigenvalues, eigenvectors = np.linalg.eigh(array.T @ array)  # ascending eigenvalues
    axes = eigenvectors[:, np.argsort(eigenvalues, kind="stable")[::-1]].T
    largest = np.abs(axes).argmax(axis=1)
    axes *= np.sign(axes[np.arange(len(axes)), largest])[:, None]
    return axes.astype(np.float32)


class Rotation(nn.Module):
    """x @ weight.T with a fixed (D, D) `weight`, the identity until `fit_rotation` sets it."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.eye(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight.to(x.dtype))


def rotation_documents(corpus: Any, config: Any) -> list[str]:
    """The documents the rotation is fitted on: `config.matryoshka_rotation_docs` of the corpus's
    whole documents (title and text, as an index embeds them), drawn with the run's seed."""
    from embedkit.data.corpus import load_sentences

    sample = load_sentences(corpus, config.column, False, config.matryoshka_rotation_docs, config.seed)
    return sample.sentences


def fit_rotation(
    rotation: Rotation, encoder: Any, documents: list[str], batch_size: int, progress: bool = False
) -> None:
    """Set `rotation` to the principal axes of `encoder`'s vectors of `documents`.

    `encoder` embeds with the model being trained, whose vectors pass through `rotation`: it must
    still be the identity, so the axes are those of the pooled vectors themselves.
    """
    eye = torch.eye(rotation.weight.shape[0], device=rotation.weight.device)
    if not torch.equal(rotation.weight, eye):
        raise RuntimeError("fit_rotation needs the identity rotation: the axes are of unrotated vectors")
    vectors = encoder.encode(documents, batch_size=batch_size, normalize=True, progress=progress)
    axes = torch.from_numpy(principal_axes(np.asarray(vectors)))
    rotation.weight.copy_(axes.to(rotation.weight.device))


__all__ = ["Rotation", "fit_rotation", "principal_axes", "rotation_documents"]
