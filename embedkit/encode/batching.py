"""Tokenize, length-sort and batch texts, then restore the caller's order.

Shared by every encoder backend (torch and ONNX), so that both see exactly the same token ids.
Sorting by token length before batching keeps padding small (about 1.6-1.85x faster on every
backend on mixed-length text); the embeddings are written back in the caller's order.
No torch here: tokenization uses the `tokenizers` library directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError
from embedkit.progress import ProgressBar


def load_tokenizer(model_dir: Path, max_seq_length: int):  # -> tokenizers.Tokenizer
    """The folder's fast tokenizer with truncation at `max_seq_length` and padding off.

    A tokenizer that cannot tokenize text (an empty or zeroed `vocab.txt`) is an `InputError`
    naming the damaged folder, here and not at the first batch.
    """
    import os

    from tokenizers import Tokenizer

    from embedkit.data.input_files import check_input_file

    # Files a tokenizer is built from; a FIFO among them would hang the library that opens it.
    names = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
             "special_tokens_map.json", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model")
    for name in names:
        if os.path.lexists(Path(model_dir) / name):
            check_input_file(Path(model_dir) / name, "tokenizer file")
    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a truncated or damaged file
            reason = " ".join(str(exc).split())[:120]
            raise InputError(f"cannot read the tokenizer {path} ({reason}): the model folder is damaged") \
                from None
    else:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError(f"{model_dir} has no tokenizer.json") from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir)).backend_tokenizer
        except Exception as exc:  # transformers raises many kinds for a bad folder
            raise InputError(f"cannot load a tokenizer from {model_dir}: {exc}") from None
    # Words no vocabulary holds whole: a WordPiece vocabulary without its [UNK] (an empty or zeroed
    # vocab.txt) fails on them here, rather than on the first unusual word of a corpus.
    try:
        tokenizer.encode("embedkit probes its tokenizer: zqxjv \u2603 \u0b90 42")
    except Exception as exc:  # tokenizers raises a bare Exception ("WordPiece error: Missing [UNK]")
        reason = " ".join(str(exc).split())[:120]
        raise InputError(
            f"the tokenizer of {model_dir} cannot tokenize text ({reason}): its vocab.txt or "
            "tokenizer files are empty or damaged; the model folder is damaged"
        ) from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_seq_length)
    return tokenizer


def pad_token_id(model_dir: Path, tokenizer) -> int:
    config_path = Path(model_dir) / "tokenizer_config.json"
    pad_token = read_json(config_path).get("pad_token") if config_path.is_file() else None
    if isinstance(pad_token, dict):  # older tokenizer_config files store an AddedToken
        pad_token = pad_token.get("content")
    token_id = tokenizer.token_to_id(pad_token or "[PAD]")
    return int(token_id) if token_id is not None else 0


@dataclass
class Batch:
    """One padded batch; `indices` are the rows' positions in the caller's list."""

    indices: np.ndarray  # (B,)
    input_ids: np.ndarray  # (B, T) int64
    attention_mask: np.ndarray  # (B, T) int64
    token_type_ids: np.ndarray  # (B, T) int64


class TokenBatcher:
    """Turns a list of texts into length-sorted, padded batches of numpy arrays."""

    def __init__(self, model_dir: Path, max_seq_length: int) -> None:
        self.max_seq_length = max_seq_length
        self.tokenizer = load_tokenizer(model_dir, max_seq_length)
        self.pad_id = pad_token_id(model_dir, self.tokenizer)
        self.truncated = 0  # texts cut at max_seq_length, summed over calls

    def batches(self, texts: Sequence[str], batch_size: int) -> Iterator[Batch]:
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        encodings = self.tokenizer.encode_batch(list(texts))
        self.truncated += sum(1 for e in encodings if e.overflowing)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")  # longest first: a too-large batch fails at once
        for start in range(0, len(order), batch_size):
            yield pad_encodings(encodings, order[start : start + batch_size], self.pad_id)


def pad_encodings(encodings: Sequence[Any], rows: np.ndarray, pad_id: int, width: int | None = None) -> Batch:
    """The tokenized texts `rows` of `encodings`, padded to the longest of them (or to `width`), (B, T)."""
    width = width or max(len(encodings[i].ids) for i in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for r, i in enumerate(rows):
        enc = encodings[i]
        n = len(enc.ids)
        ids[r, :n] = enc.ids
        mask[r, :n] = 1
        types[r, :n] = enc.type_ids
    return Batch(np.asarray(rows), ids, mask, types)


def as_text_list(texts: str | Sequence[str]) -> tuple[list[str], bool]:
    """A list of texts and whether the caller passed a single string."""
    if isinstance(texts, str):
        return [texts], True
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {i} is {type(text).__name__}, not str")
    return texts, False


def encode_in_order(
    batcher: TokenBatcher,
    texts: Sequence[str],
    batch_size: int,
    dim: int,
    run_batch: Callable[[Batch], np.ndarray],
    progress: bool = False,
    description: str = "embedding",
) -> np.ndarray:
    """Run `run_batch` over length-sorted batches and return float32 [n, dim] in input order."""
    out = np.empty((len(texts), dim), dtype=np.float32)
    if not len(texts):
        return out
    with ProgressBar(len(texts), description, enabled=progress, rate_unit="sent/s", transient=True) as bar:
        for batch in batcher.batches(texts, batch_size):
            out[batch.indices] = run_batch(batch)
            bar.advance(len(batch.indices))
    return out


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
