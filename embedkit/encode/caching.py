"""Encoder wrappers that answer repeated texts from memory: each distinct text once per evaluation
round (`CachingEncoder`), or a repeated call with the same texts from its last answer (`RepeatCache`)."""

from __future__ import annotations

import numpy as np

from embedkit.encode.protocol import Encoder
from embedkit.encode.wrapping import EncoderWrapper


class CachingEncoder(EncoderWrapper):
    """An encoder that embeds each distinct text once and then answers from memory.

    One run's evaluations share most of their texts: the pseudo-query corpus is the retrieval
    corpus less the held-out query sentences, and STS files repeat sentences. The model does not
    change between them, so re-embedding a few thousand long documents is wasted time (it was
    most of an experiment run's evaluation on CPU). Wrap one model for one round of evaluation.
    """

    def __init__(self, encoder: Encoder) -> None:
        super().__init__(encoder)
        self._vectors: dict[tuple[str, bool | None], np.ndarray] = {}

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


class RepeatCache(EncoderWrapper):
    """An encoder that answers a repeated `encode` of the same texts from its last answer.

    Unlike `CachingEncoder` it embeds each call's texts as given (duplicates and batches
    included), so its vectors are the wrapped encoder's to the last bit; the fusion calibration
    searches the same pseudo queries once per candidate.
    """

    def __init__(self, encoder: Encoder) -> None:
        super().__init__(encoder)
        self._last: tuple[tuple[tuple[str, ...], int, bool | None], np.ndarray] | None = None

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        key = (tuple(texts), batch_size, normalize)
        if self._last is None or self._last[0] != key:
            self._last = (key, self.encoder.encode(texts, batch_size=batch_size, normalize=normalize))
        return self._last[1]
