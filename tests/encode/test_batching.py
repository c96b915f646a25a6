"""Length-sorted batching: the caller's order comes back, and truncation is counted."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from embedkit.encode.batching import TokenBatcher, encode_in_order
from embedkit.encode.caching import CachingEncoder
from embedkit.errors import InputError

TEXTS = [
    "one",
    "the wing flow is high and the boundary layer is thin at mach number five",
    "a cat",
    "heat transfer",
    "shock wave and boundary layer of a small body at high speed with drag and lift",
    "the court",
    "a man is playing guitar on the beach",
]


def test_batches_are_length_sorted_and_cover_every_text(tiny_bert):
    batcher = TokenBatcher(tiny_bert, max_seq_length=64)
    batches = list(batcher.batches(TEXTS, batch_size=3))
    seen = np.concatenate([b.indices for b in batches])
    assert sorted(seen.tolist()) == list(range(len(TEXTS)))
    lengths = [int(row.sum()) for b in batches for row in b.attention_mask]
    assert lengths == sorted(lengths, reverse=True)
    assert [len(b.indices) for b in batches] == [3, 3, 1]


def test_encode_in_order_restores_the_callers_order(tiny_bert):
    # Each row's "vector" is computed from its own token ids; an independent tokenization of each
    # text alone says which row must land where.
    batcher = TokenBatcher(tiny_bert, max_seq_length=64)

    def run(batch):
        lengths = batch.attention_mask.sum(1)
        first_word = batch.input_ids[:, 1]
        return np.stack([lengths, first_word], axis=1).astype(np.float32)

    out = encode_in_order(batcher, TEXTS, batch_size=2, dim=2, run_batch=run)
    expected = []
    for text in TEXTS:
        ids = batcher.tokenizer.encode(text).ids
        expected.append([len(ids), ids[1]])
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32))


def test_truncation_is_counted(tiny_bert):
    from tokenizers import Tokenizer

    limit = 8
    untruncated = Tokenizer.from_file(str(tiny_bert / "tokenizer.json"))
    untruncated.no_truncation()
    too_long = sum(len(untruncated.encode(t).ids) > limit for t in TEXTS)
    assert 0 < too_long < len(TEXTS)
    batcher = TokenBatcher(tiny_bert, max_seq_length=limit)
    batches = list(batcher.batches(TEXTS, batch_size=4))
    assert batcher.truncated == too_long
    assert max(b.input_ids.shape[1] for b in batches) == limit
    list(batcher.batches(TEXTS[:2], batch_size=4))
    assert batcher.truncated == too_long + 1  # summed over calls


def test_torch_encoder_gives_each_text_the_vector_it_gets_alone(tiny_bert):
    from embedkit.encode.loading import load_encoder

    encoder = load_encoder(tiny_bert, device="cpu")
    together = encoder.encode(TEXTS, batch_size=3)
    alone = np.stack([encoder.encode(t) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_batch_size_must_be_positive(tiny_bert):
    with pytest.raises(InputError, match="batch size must be at least 1"):
        list(TokenBatcher(tiny_bert, 64).batches(TEXTS, batch_size=0))


class _CountingEncoder:
    """Embeds a text as [len, count of 'a', 1]; records every text it was asked for."""

    dim = 3

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        self.seen.extend(texts)
        vectors = np.array([[len(t), t.count("a"), 1.0] for t in texts], dtype=np.float32)
        vectors = vectors.reshape(len(texts), 3)
        if normalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


def test_caching_encoder_embeds_each_text_once_and_keeps_order():
    inner = _CountingEncoder()
    cached = CachingEncoder(inner)
    first = cached.encode(["banana", "kiwi", "banana"], normalize=True)
    second = cached.encode(["apple", "kiwi", "banana"], normalize=True)
    assert inner.seen == ["banana", "kiwi", "apple"]
    reference = _CountingEncoder()
    np.testing.assert_array_equal(first, reference.encode(["banana", "kiwi", "banana"], normalize=True))
    np.testing.assert_array_equal(second, reference.encode(["apple", "kiwi", "banana"], normalize=True))
    # normalized and raw vectors of one text are different answers, kept apart
    raw = cached.encode(["kiwi"], normalize=False)
    np.testing.assert_array_equal(raw, [[4.0, 0.0, 1.0]])
    assert cached.encode([], normalize=True).shape == (0, 3)
    assert cached.dim == 3


@pytest.mark.parametrize("size", [10**5, 2 * 10**6])
def test_a_huge_text_is_tokenized_only_as_far_as_the_model_reads(tiny_bert, monkeypatch, size):
    """The tokenizer is handed a bounded prefix of a huge text, and the vector is the one of its
    first max_seq_length tokens (the reference: the same text cut to a few thousand characters)."""
    from embedkit import load_encoder

    encoder = load_encoder(tiny_bert, device="cpu")
    words = ["wing", "flow", "air", "pressure", "boundary", "layer", "shock", "wave", "heat", "transfer"]
    huge = " ".join(words[i % len(words)] for i in range(size // 6))
    seen: list[int] = []
    tokenizer = encoder.batcher.tokenizer
    original = tokenizer.encode_batch_fast  # what the batcher calls (`encode_without_offsets`)
    monkeypatch.setattr(
        tokenizer,
        "encode_batch_fast",
        lambda texts, *a, **k: seen.extend(map(len, texts)) or original(texts, *a, **k),
    )
    vectors = encoder.encode([huge, "wing"], normalize=True)
    monkeypatch.undo()
    reference = encoder.encode([huge[:5000], "wing"], normalize=True)
    np.testing.assert_allclose(vectors, reference, atol=1e-6)
    assert max(seen) <= encoder.max_seq_length * 1000 < len(huge)
    assert encoder.batcher.truncated >= 1


def test_encodings_without_offsets_are_the_tokenizers_own(tiny_bert):
    """`encode_batch_fast` skips the character offsets; ids, types, masks and overflow must be those
    of `encode_batch` (the reference), truncation and unusual text included."""
    from embedkit.encode.batching import encode_without_offsets

    tokenizer = TokenBatcher(tiny_bert, max_seq_length=16).tokenizer
    texts = [
        *TEXTS,
        "Größe, naïve café — déjà vu",
        "東京 タワー and 北京",
        "emoji 🚀 rockets 🚀🚀 and tabs\tand\nnewlines",
        " ".join(["pressure"] * 100),  # over 16 tokens: truncated, with overflow
        "   ",
        "",
    ]
    fast = encode_without_offsets(tokenizer, texts)
    reference = tokenizer.encode_batch(texts)
    assert len(fast) == len(reference)
    for got, want in zip(fast, reference, strict=True):
        assert (got.ids, got.type_ids, got.attention_mask) == (want.ids, want.type_ids, want.attention_mask)
        assert len(got.overflowing) == len(want.overflowing)
    assert any(e.overflowing for e in reference)  # the case is really there


def test_tokenizing_ahead_gives_the_same_batches_and_starts_the_next_chunk_early(tiny_bert):
    from embedkit.encode.batching import FIXED_SHAPE_CHUNK_TEXTS as CHUNK_TEXTS  # fixed shapes' chunks
    from embedkit.encode.shapes import ShapePlan

    words = ["wing", "flow", "heat", "shock", "layer", "drag", "lift", "mach"]
    count = 2 * CHUNK_TEXTS + 500  # three chunks
    texts = [" ".join(words[(i * 7 + j) % 8] for j in range(1 + i % 23)) for i in range(count)]
    texts[5] = " ".join(["pressure"] * 100)  # over 16 tokens, as many others: counted either way
    plain, ahead = TokenBatcher(tiny_bert, max_seq_length=16), TokenBatcher(tiny_bert, max_seq_length=16)
    shapes = ShapePlan(16, True)
    want = list(plain.batches(texts, 64, shapes))
    got = list(ahead.batches(texts, 64, shapes, ahead=True))
    assert len(got) == len(want) and plain.truncated == ahead.truncated > 0
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.indices, w.indices) and np.array_equal(g.input_ids, w.input_ids)
        assert np.array_equal(g.attention_mask, w.attention_mask) and g.real_rows == w.real_rows
    # the second chunk is being tokenized before the first chunk's first batch is used
    calls = []
    original = ahead._encode
    ahead._encode = lambda chunk, positions: calls.append(len(chunk)) or original(chunk, positions)
    iterator = ahead.batches(texts, 64, shapes, ahead=True)
    next(iterator)
    for _ in range(200):
        if len(calls) >= 2:
            break
        threading.Event().wait(0.01)
    assert calls[:2] == [CHUNK_TEXTS, CHUNK_TEXTS]
    iterator.close()  # stops early: waits for the chunk in flight, no error


def test_a_bad_text_in_a_later_chunk_is_the_same_error_ahead(tiny_bert):
    from embedkit.encode.batching import CHUNK_TEXTS

    texts = ["wing flow"] * (CHUNK_TEXTS + 10)
    texts[-1] = "bad \ud800 bytes"  # a lone surrogate: refused by the second chunk's tokenization
    with pytest.raises(InputError) as plain:
        list(TokenBatcher(tiny_bert, max_seq_length=16).batches(texts, 64))
    with pytest.raises(InputError) as ahead:
        list(TokenBatcher(tiny_bert, max_seq_length=16).batches(texts, 64, ahead=True))
    assert str(ahead.value) == str(plain.value) and f"text {len(texts)}" in str(ahead.value)
