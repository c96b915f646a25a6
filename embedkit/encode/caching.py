"""An encoder wrapper that embeds each distinct text once per evaluation round."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedkit.encode.protocol import EncoderBase


class CachingEncoder(EncoderBase):
    """An encoder that embeds each distinct text once and then answers from memory.

    One run's evaluations share most of their texts: the pseudo-query corpus is the retrieval
    corpus less the held-out query sentences, and STS files repeat sentences. The model does not
    change between them, so re-embedding a few thousand long documents is wasted time (it was
    most of an experiment run's evaluation on CPU). Wrap one model for one round of evaluation.
    """

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self._vectors: dict[tuple[str, bool | None], np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)  # dim, max_seq_length, fingerprint, ...

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (t, normalize) not in self._vectors))
        if missing or not texts:
            vectors = self.encoder.encode(
                missing, batch_size=batch_size, normalize=normalize, progress=progress
            )
            if not texts:
                return vectors
            self._vectors.update(((t, normalize), v) for t, v in zip(missing, vectors, strict=True))
        return np.stack([self._vectors[(t, normalize)] for t in texts])
