"""The encoder wrappers (`CachingEncoder`, `RepeatCache`, `TruncatedEncoder`) hand on what they name
and nothing else, and the protocols an encoder may add are told apart by `isinstance`: the texts
a call cut are named only by an encoder that embedded the caller's texts one for one."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_helpers import TableEncoder
from tokenizers import Tokenizer

from embedkit.arguments import encoder_or_folder
from embedkit.encode.caching import CachingEncoder, RepeatCache
from embedkit.encode.protocol import Encoder, Encodes, IdentifiedEncoder, TokenizingEncoder
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.encode.truncated_encoder import TruncatedEncoder
from embedkit.encode.truncation import cut_positions
from embedkit.errors import InputError

SHORT, LONG = "a wing", " ".join(["turbulent boundary layer"] * 40)  # LONG: far over 64 tokens
HANDED_ON = ("backend", "path", "device", "fingerprint", "identity", "max_seq_length", "truncated")


@pytest.fixture(scope="module")
def torch_encoder(tiny_bert: Path) -> TorchEncoder:
    return TorchEncoder(tiny_bert, device="cpu")


def _cut_by_the_tokenizer(folder: Path, texts: list[str], max_tokens: int) -> list[int]:
    """The reference: positions of the texts whose full tokenization (special tokens included) is
    longer than the model reads, from the folder's tokenizer with truncation off."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    return [i for i, text in enumerate(texts) if len(tokenizer.encode(text).ids) > max_tokens]


@pytest.mark.parametrize("wrap", [CachingEncoder, RepeatCache, lambda e: TruncatedEncoder(e, 8)])
def test_a_wrapper_hands_on_what_it_names_and_nothing_else(torch_encoder, wrap, one_thread) -> None:
    wrapped = wrap(torch_encoder)
    assert isinstance(wrapped, Encoder) and isinstance(wrapped, IdentifiedEncoder)
    for name in HANDED_ON:
        assert getattr(wrapped, name) == getattr(torch_encoder, name), name
    # the stages and the model give the wrapped encoder's own vectors, never the wrapper's
    for name in ("stages", "run_batch", "model", "head", "spec"):
        assert not hasattr(wrapped, name), name
    assert wrapped.dim == (8 if isinstance(wrapped, TruncatedEncoder) else torch_encoder.dim)


def test_a_truncating_wrapper_names_the_texts_its_call_cut(tiny_bert, torch_encoder, one_thread) -> None:
    texts = [SHORT, LONG, "shock waves", LONG + " again"]
    expected = _cut_by_the_tokenizer(tiny_bert, texts, torch_encoder.max_seq_length)
    assert expected == [1, 3]
    truncated = TruncatedEncoder(torch_encoder, 8)
    truncated.encode(texts)
    assert isinstance(truncated, TokenizingEncoder) and cut_positions(truncated) == expected
    torch_encoder.encode(texts[:2])
    assert cut_positions(torch_encoder) == [1]


def test_a_caching_wrapper_names_no_cut_texts(torch_encoder, one_thread) -> None:
    """A cache embeds only the texts it has not seen, so the wrapped encoder's latest call is not
    the caller's: its positions would name the wrong texts."""
    cached = CachingEncoder(torch_encoder)
    cached.encode([LONG, SHORT])
    cached.encode([SHORT, "shock waves", LONG])  # the model embeds only "shock waves"
    assert not isinstance(cached, TokenizingEncoder) and cut_positions(cached) == []


def test_an_encoder_without_a_batcher_or_an_identity_is_still_an_encoder(tiny_bert) -> None:
    table = TableEncoder(tiny_bert, {}, dim=4)
    assert isinstance(table, Encoder)
    assert not isinstance(table, TokenizingEncoder) and not isinstance(table, IdentifiedEncoder)
    assert cut_positions(table) == []
    truncated = TruncatedEncoder(table, 2)
    truncated.encode([SHORT])
    assert truncated.batcher is None and truncated.identity is None and cut_positions(truncated) == []


def test_an_open_encoder_is_anything_with_encode(tiny_bert) -> None:
    table = TableEncoder(tiny_bert, {}, dim=4)
    assert isinstance(table, Encodes) and encoder_or_folder("model", table) is table
    for value in (object(), 42, b"bytes"):
        with pytest.raises(InputError, match="must be a model folder's path or an open encoder"):
            encoder_or_folder("model", value)
