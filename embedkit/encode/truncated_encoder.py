"""An encoder whose vectors are another encoder's, cut to their first N dimensions and
renormalized (`embedkit.encode.dimensions.truncate_vectors`): what an index built with
`index --dim` embeds with. Apart from the cut itself, which stays numpy only and below every
encoder, so the encoder's stages can cut without importing an encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from embedkit.encode.dimensions import truncate_vectors
from embedkit.encode.protocol import Encoder, TokenizingEncoder
from embedkit.encode.wrapping import EncoderWrapper
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.encode.batching import TokenBatcher


class TruncatedEncoder(EncoderWrapper):
    """Another encoder's vectors cut to their first `dim` dimensions and renormalized
    (`truncate_vectors`): what an index built with `index --dim` embeds its documents and queries
    with. Its folder, fingerprint, identity, device and counts are the wrapped encoder's
    (`EncoderWrapper`), and so is its token batcher: it embeds the caller's texts one for one."""

    def __init__(self, encoder: Encoder, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= encoder.dim:
            raise InputError(
                f"cannot keep {dim!r} dimensions of {encoder.dim}-d vectors: use 1 to {encoder.dim}"
            )
        super().__init__(encoder)
        self._dim = dim

    # Its stages are not handed on: they give the model's full vectors, and a caller that needs
    # them (the server's embedding routes) holds the wrapped encoder itself.
    @property
    def dim(self) -> int:
        return self._dim

    @property
    def batcher(self) -> TokenBatcher | None:  # the texts the latest call cut (`encode.truncation`)
        return self.encoder.batcher if isinstance(self.encoder, TokenizingEncoder) else None

    def encode_texts(
        self, texts: Sequence[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        full = self.encoder.encode(list(texts), batch_size=batch_size, normalize=True, progress=progress)
        return truncate_vectors(np.asarray(full).reshape(len(texts), -1), self.dim)


def keep_dimensions(encoder: Encoder, dim: int | None) -> Encoder:
    """`encoder` giving its first `dim` dimensions, renormalized; itself where `dim` is None or its own."""
    if dim is None or dim == encoder.dim:
        return encoder
    if isinstance(encoder, TruncatedEncoder):
        encoder = encoder.encoder
    return TruncatedEncoder(encoder, dim)


__all__ = ["TruncatedEncoder", "keep_dimensions"]
