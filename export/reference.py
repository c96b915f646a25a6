"""The vectors an export is checked against: sentence-transformers itself, where it is installed.

Checking the graph against embedkit's own torch path would pass a mistake both make (a Dense
module left out, a pooling mode misread). `SentenceTransformer` is the reference implementation of
the folder format, so parity compares with it whenever the package is installed and the folder
is a sentence-transformers model (`modules.json`); otherwise with `TorchEncoder`, and
`embedkit.json` records which (`parity.reference`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

import numpy as np


class ReferenceEncoder(Protocol):
    name: str

    def encode(self, texts: list[str], batch_size: int, normalize: bool, progress: bool) -> np.ndarray: ...


class SentenceTransformerReference:
    """`SentenceTransformer(folder).encode`, in the call shape of embedkit's encoders."""

    def __init__(self, folder: Path, device: str, max_seq_length: int) -> None:
        import sentence_transformers
        from sentence_transformers import SentenceTransformer

        torch_device = None if device == "auto" else device
        self.model = SentenceTransformer(str(folder), device=torch_device, local_files_only=True)
        self.model.max_seq_length = max_seq_length  # as embedkit truncates
        self.name = f"sentence-transformers {sentence_transformers.__version__}"

    def encode(self, texts: list[str], batch_size: int, normalize: bool, progress: bool) -> np.ndarray:
        vectors = self.model.encode(
            list(texts),
            prompt="",  # the graph embeds the text it is given; a default prompt is added before it
            batch_size=batch_size,
            show_progress_bar=progress,
            convert_to_numpy=True,
            normalize_embeddings=normalize,
        )
        return np.asarray(vectors, dtype=np.float32)


class TorchReference:
    """embedkit's torch path: the reference where sentence-transformers is not installed."""

    name = "embedkit torch"

    def __init__(self, folder: Path, device: str) -> None:
        from embedkit.encode.torch_backend import TorchEncoder

        self.encoder = TorchEncoder(folder, device=device)

    def encode(self, texts: list[str], batch_size: int, normalize: bool, progress: bool) -> np.ndarray:
        return self.encoder.encode(texts, batch_size, normalize, progress)


def reference_encoder(folder: Path, device: str, max_seq_length: int) -> ReferenceEncoder:
    """sentence-transformers for a folder with `modules.json` when it is installed, else embedkit's."""
    if (folder / "modules.json").is_file() and importlib.util.find_spec("sentence_transformers"):
        return SentenceTransformerReference(folder, device, max_seq_length)
    return TorchReference(folder, device)
