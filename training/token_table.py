"""The training corpus as one padded array of token ids, built in chunks: what a million sentences need.

The tokenizer's `Encoding` objects carry the tokens' strings, offsets and several masks besides
the ids, about 6 KB each at 32 tokens (600 MB for 100,000 Wikipedia sentences, measured): a
million of them would hold gigabytes for the whole run. The table keeps only what a batch is
made of, the ids (N, W) as int32 and the lengths (N,), 128 MB for a million sentences at W = 32,
and tokenizes a chunk at a time so the encodings never exist all at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.batching import encode_without_offsets
from embedkit.encode.token_arrays import pad_rows, tokens_of

CHUNK = 16_384  # sentences tokenized at once: a few MB of encodings, enough for the tokenizer's threads


@dataclass(frozen=True)
class TokenTable:
    """Token ids of N texts, truncated to W, padded with `pad_id`; one row per text."""

    ids: np.ndarray  # (N, W) int32
    type_ids: np.ndarray  # (N, W) int8: token_type_ids (0 for single texts)
    lengths: np.ndarray  # (N,) int32: tokens of each text, special tokens included
    pad_id: int

    @classmethod
    def from_model(cls, model_path: Path, width: int, texts: Sequence[str]) -> TokenTable:
        """`texts` tokenized by the model folder's tokenizer, truncated to `width` tokens."""
        from embedkit.encode.batching import TokenBatcher

        batcher = TokenBatcher(model_path, width)
        return cls.tokenize(batcher.tokenizer, texts, batcher.max_seq_length, batcher.pad_id)

    @classmethod
    def tokenize(
        cls, tokenizer: Any, texts: Sequence[str], width: int, pad_id: int, chunk: int = CHUNK
    ) -> TokenTable:
        """Tokenize `texts` with a Hugging Face fast `tokenizer` that truncates to `width` tokens."""
        ids = np.full((len(texts), width), pad_id, dtype=np.int32)
        type_ids = np.zeros((len(texts), width), dtype=np.int8)
        lengths = np.zeros(len(texts), dtype=np.int32)
        for start in range(0, len(texts), chunk):
            # the encoder's prepare stage: one flat table of the chunk, padded by NumPy
            tokens = tokens_of(encode_without_offsets(tokenizer, list(texts[start : start + chunk])), True)
            longest = int(tokens.lengths.max(initial=0))
            if longest > width:
                raise ValueError(f"the tokenizer gave {longest} tokens, more than the table's width {width}")
            end = start + len(tokens)
            batch = pad_rows(tokens, np.arange(len(tokens)), pad_id, width, dtype=np.int32)
            ids[start:end] = batch.input_ids
            type_ids[start:end] = batch.token_type_ids
            lengths[start:end] = tokens.lengths
        return cls(ids, type_ids, lengths, pad_id)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return int(self.ids.shape[1])

    def longest(self, rows: np.ndarray) -> int:
        """Tokens of the longest text among `rows`."""
        return int(self.lengths[rows].max())

    def batch(self, rows: np.ndarray, width: int | None = None) -> dict[str, np.ndarray]:
        """Backbone inputs (B, T) of `rows` as int64, T = `width` or the longest of them."""
        width = width or self.longest(rows)
        positions = np.arange(width)
        return {
            "input_ids": self.ids[rows, :width].astype(np.int64),
            "attention_mask": (positions < self.lengths[rows, None]).astype(np.int64),
            "token_type_ids": self.type_ids[rows, :width].astype(np.int64),
        }


def position_limit(model_config: Any) -> int:
    """The longest input the backbone has position embeddings for (RoBERTa's first two are padding)."""
    # transformers' configs (4.x, 5.x): absolute-position models have the field, others no limit
    limit = int(getattr(model_config, "max_position_embeddings", 0) or 1_000_000)
    return limit - 2 if "roberta" in str(getattr(model_config, "model_type", "")) else limit


__all__ = ["TokenTable", "position_limit"]
