"""The one interface every encoder satisfies and every consumer accepts: `Encoder`.

The ONNX Runtime and torch backends, the caching wrapper of one evaluation round and the
training model's inference view (checkpoint selection) all implement it. Evaluators, the index
and the streaming embedder accept any `Encoder`; they read `fingerprint` only where a model's
identity matters (an index records it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from embedkit.encode.batching import as_text_list


@runtime_checkable
class Encoder(Protocol):
    """Texts in, float32 vectors out, in the caller's order.

    `encode(texts)` gives [n, dim] for a list and [dim] for one string; `normalize=None` keeps the
    model's own choice, True L2-normalises, False asks for raw vectors. `progress` shows a bar.
    """

    backend: str  # "onnx", "torch", or what a wrapper reports
    path: Path  # the model folder
    dim: int
    max_seq_length: int

    @property
    def device(self) -> Any:  # where the model runs, printable ("cpu", "cuda", a torch.device)
        ...

    @property
    def fingerprint(self) -> str:  # the model's full identity (`embedkit.encode.identity`)
        ...

    @property
    def truncated(self) -> int:  # texts cut at max_seq_length so far
        ...

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray: ...


class EncoderBase:
    """The shared half of every encoder: `encode` takes a string or a list and checks it.

    Subclasses implement `encode_texts(texts, batch_size, normalize, progress)` for a list of
    strings, returning float32 [n, dim] in order; a single string gives its [dim] row.
    """

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        items, single = as_text_list(texts)
        vectors = self.encode_texts(items, batch_size, normalize, progress)
        return vectors[0] if single else vectors

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        raise NotImplementedError
