"""The one interface every encoder satisfies and every consumer accepts: `Encoder`.

The ONNX Runtime and torch backends, the caching wrapper of one evaluation round and the
training model's inference view (checkpoint selection) all implement it. Evaluators, the index
and the streaming embedder accept any `Encoder`; they read `fingerprint` only where a model's
identity matters (an index records it).

Every attribute a caller reads of an encoder is declared here: `Encodes` (only `encode`: what an
argument check asks of an open encoder), `Encoder`; two that some encoders add, checked with
`isinstance` where a caller may be given either kind, `TokenizingEncoder` (its token batcher, for
the texts a call cut) and `IdentifiedEncoder` (the model's full identity, for a refusal that names
what differs); and `StagedEncoder`, what `load_encoder` returns: the backends' stages, which the
server runs itself. No wrapper forwards what it does not name (`embedkit.encode.wrapping`);
tests/test_no_probing.py holds that, and that no caller probes an encoder with `getattr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from embedkit.encode.batching import as_text_list

if TYPE_CHECKING:
    from embedkit.encode.batching import TokenBatcher
    from embedkit.encode.identity import ModelIdentity
    from embedkit.encode.stages import EncoderStages


@runtime_checkable
class Encodes(Protocol):
    """Texts in, float32 vectors out, in the caller's order: anything with `encode`.

    `encode(texts)` gives [n, dim] for a list and [dim] for one string; `normalize=None` keeps the
    model's own choice, True L2-normalises, False asks for raw vectors. `progress` shows a bar.
    What a caller handed an open encoder checks it is given (a string has an `encode` too: such a
    check excludes `str` and `bytes` itself).
    """

    def encode(
        self,
        texts: str | Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray: ...


@runtime_checkable
class Encoder(Encodes, Protocol):
    """Texts in, float32 vectors out, in the caller's order (`Encodes.encode`), and what the
    model is: its backend, folder, dimension, maximum length, device, fingerprint and the texts it
    has cut so far."""

    # read-only here, so a wrapper's properties (`embedkit.encode.wrapping`) satisfy them as well
    @property
    def backend(self) -> str:  # "onnx", "torch", or what a wrapper reports
        ...

    @property
    def path(self) -> Path:  # the model folder
        ...

    @property
    def dim(self) -> int: ...

    @property
    def max_seq_length(self) -> int: ...

    @property
    def device(self) -> Any:  # where the model runs, printable ("cpu", "cuda", a torch.device)
        ...

    @property
    def fingerprint(self) -> str:  # the model's full identity (`embedkit.encode.identity`)
        ...

    @property
    def truncated(self) -> int:  # texts cut at max_seq_length so far
        ...


@runtime_checkable
class TokenizingEncoder(Protocol):
    """An encoder that tokenizes here, with a `TokenBatcher`: its `cut_positions` say which texts of
    the latest call were cut at the maximum length (`embedkit.encode.truncation`). Encoders without
    one (a test's table of vectors, a remote service) name no texts."""

    @property
    def batcher(self) -> TokenBatcher | None:  # None: a wrapper whose encoder has none
        ...


@runtime_checkable
class IdentifiedEncoder(Protocol):
    """An encoder that knows its model's full identity (`embedkit.encode.identity`), so that a
    refusal of the wrong model can name what differs (`check_same_model`)."""

    @property
    def identity(self) -> ModelIdentity | None:  # None: a wrapper whose encoder does not say
        ...


class StagedEncoder(Encoder, Protocol):
    """A backend encoder (ONNX Runtime, torch) with its three stages (`embedkit.encode.stages`):
    what the server holds, since it tokenizes, batches and runs requests' texts itself."""

    stages: EncoderStages
    precision: str  # "fp32", "fp16", "int8"
    pooling: str  # "mean", "cls", ...
    normalize_default: bool  # the model L2-normalises its vectors


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
