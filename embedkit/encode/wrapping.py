"""`EncoderWrapper`: the base of an encoder that wraps another (`CachingEncoder`, `RepeatCache`,
`TruncatedEncoder`) and hands on, by name, what `Encoder` declares and `IdentifiedEncoder` adds.

Nothing else is handed on: a wrapper changes which vectors come back, so the wrapped encoder's
stages or token batcher would answer for calls the wrapper did not make. A wrapper that keeps the
caller's texts one for one (`TruncatedEncoder`) hands on its batcher itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.encode.protocol import Encoder, EncoderBase, IdentifiedEncoder

if TYPE_CHECKING:
    from embedkit.encode.identity import ModelIdentity


class EncoderWrapper(EncoderBase):
    """An `Encoder` over `encoder`: its backend, folder, device, identity, dimension and counts."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    @property
    def backend(self) -> str:
        return str(self.encoder.backend)

    @property
    def path(self) -> Path:
        return self.encoder.path

    @property
    def device(self) -> Any:  # printable, as `Encoder.device`
        return self.encoder.device

    @property
    def fingerprint(self) -> str:
        return str(self.encoder.fingerprint)

    @property
    def identity(self) -> ModelIdentity | None:
        return self.encoder.identity if isinstance(self.encoder, IdentifiedEncoder) else None

    @property
    def dim(self) -> int:
        return int(self.encoder.dim)

    @property
    def max_seq_length(self) -> int:
        return int(self.encoder.max_seq_length)

    @property
    def truncated(self) -> int:
        return int(self.encoder.truncated)


__all__ = ["EncoderWrapper"]
