"""The host path in arrays gives the batches, and so the vectors, of the Python padding before it.

The reference is the padding embedkit used before (every row's ids as a list, each token placed
by `np.fromiter`, type ids read from the encodings, three int64 arrays), copied here unchanged
as the slow implementation, with the batching around it.
"""

from __future__ import annotations

import random
from itertools import chain

import numpy as np
import pytest

from embedkit.encode import batching
from embedkit.encode.batching import TokenBatcher
from embedkit.encode.shapes import ShapePlan
from embedkit.encode.token_arrays import Tokens, pad_rows, tokens_of


def reference_pad(encodings, rows, pad_id, shapes=None, max_rows=None):
    """The padding of before, verbatim but for the return value (ids, mask, type ids)."""
    rows = np.asarray(rows, dtype=np.int64)
    ids_lists = [encodings[i].ids for i in rows]
    lengths = np.fromiter(map(len, ids_lists), dtype=np.int64, count=len(rows))
    count = len(rows)
    width = int(lengths.max(initial=1))
    height = count
    if shapes is not None:
        width = shapes.length(width)
        height = shapes.rows(count, max(max_rows or count, count))
    real = np.arange(width) < lengths[:, None]
    ids = np.full((height, width), pad_id, dtype=np.int64)
    types = np.zeros((height, width), dtype=np.int64)
    mask = np.zeros((height, width), dtype=np.int64)
    total = int(lengths.sum())
    ids[:count][real] = np.fromiter(chain.from_iterable(ids_lists), dtype=np.int64, count=total)
    types[:count][real] = np.fromiter(
        chain.from_iterable(encodings[i].type_ids for i in rows), dtype=np.int64, count=total
    )
    mask[:count] = real
    mask[count:, 0] = 1
    return ids, mask, types


def reference_batches(tokenizer, pad_id, texts, batch_size, shapes=None, window=None):
    """The batching of before: by characters, chunks of CHUNK_TEXTS (`window`), by tokens within a
    chunk."""
    chars = np.array([len(t) for t in texts])
    by_chars = np.argsort(-chars, kind="stable")
    chunk = batch_size * max(1, -(-(window or batching.CHUNK_TEXTS) // batch_size))
    for start in range(0, len(by_chars), chunk):
        part = by_chars[start : start + chunk]
        encodings = tokenizer.encode_batch([texts[i] for i in part])
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        for first in range(0, len(order), batch_size):
            rows = order[first : first + batch_size]
            yield (part[rows], *reference_pad(encodings, rows, pad_id, shapes, batch_size))


def mixed_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["flow", "wing", "boundary", "layer", "heat", "transfer", "Mach", "shock", "über", "naïve"]
    return [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 90))) for _ in range(count)]


@pytest.mark.parametrize("shapes", [None, ShapePlan(32)])
@pytest.mark.parametrize("workers", [0, 2])
def test_batches_equal_the_python_padding_of_before(tiny_bert, monkeypatch, shapes, workers):
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 16)  # several chunks
    monkeypatch.setattr(batching, "FIXED_SHAPE_CHUNK_TEXTS", 8)  # smaller ones under fixed shapes
    texts = mixed_texts(70)
    batcher = TokenBatcher(tiny_bert, 32)  # long texts are truncated
    new = list(batcher.batches(texts, 6, shapes, workers=workers))
    window = 8 if shapes is not None else 16
    old = list(reference_batches(batcher.tokenizer, batcher.pad_id, texts, 6, shapes, window))
    assert len(new) == len(old)
    for batch, (indices, ids, mask, types) in zip(new, old, strict=True):
        np.testing.assert_array_equal(batch.indices, indices)
        pairs = ((batch.input_ids, ids), (batch.attention_mask, mask), (batch.token_type_ids, types))
        for got, want in pairs:
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)
    assert batcher.truncated == sum(1 for t in texts if len(batcher.tokenizer.encode(t).overflowing))


def test_int32_and_no_type_ids_where_the_graph_takes_none(tiny_bert):
    batcher = TokenBatcher(tiny_bert, 32)
    texts = mixed_texts(9, seed=1)
    tokens = batcher.tokenize(texts)
    encodings = batcher.tokenizer.encode_batch(texts)
    rows = np.array([4, 0, 8, 2])
    batch = pad_rows(tokens, rows, batcher.pad_id, dtype=np.int32, type_ids=False)
    ids, mask, _ = reference_pad(encodings, rows, batcher.pad_id)
    assert batch.input_ids.dtype == batch.attention_mask.dtype == np.int32 and batch.token_type_ids is None
    np.testing.assert_array_equal(batch.input_ids, ids)
    np.testing.assert_array_equal(batch.attention_mask, mask)
    np.testing.assert_array_equal(batch.lengths, [len(encodings[i].ids) for i in rows])


def test_a_table_of_rows_of_other_tables_pads_as_they_do(tiny_bert):
    batcher = TokenBatcher(tiny_bert, 32)
    first, second = batcher.tokenize(mixed_texts(5, 2)), batcher.tokenize(mixed_texts(4, 3))
    joined = Tokens.from_rows([first.row(3), second.row(0), first.row(1)])
    texts = [mixed_texts(5, 2)[3], mixed_texts(4, 3)[0], mixed_texts(5, 2)[1]]
    ids, mask, _ = reference_pad(batcher.tokenizer.encode_batch(texts), [0, 1, 2], batcher.pad_id)
    batch = pad_rows(joined, np.arange(3), batcher.pad_id)
    np.testing.assert_array_equal(batch.input_ids, ids)
    np.testing.assert_array_equal(batch.attention_mask, mask)


def test_texts_of_no_tokens_pad_to_one_masked_position():
    class Empty:
        ids: list = []
        type_ids: list = []
        overflowing: list = []

    tokens = tokens_of([Empty(), Empty()])
    batch = pad_rows(tokens, np.array([1, 0]), pad_id=5)
    assert batch.input_ids.tolist() == [[5], [5]] and batch.attention_mask.tolist() == [[0], [0]]


def test_encode_gives_the_vectors_of_before_to_the_last_bit(tiny_onnx, monkeypatch):
    from embedkit.encode.onnx_backend import OUTPUT_NAME, OnnxEncoder

    monkeypatch.setattr(batching, "CHUNK_TEXTS", 24)
    texts = mixed_texts(60, seed=4)
    encoder = OnnxEncoder(tiny_onnx, device="cpu")
    got = encoder.encode(texts, batch_size=8)
    names = {i.name for i in encoder.session.get_inputs()}
    want = np.empty_like(got)
    tokenizer, pad_id = encoder.batcher.tokenizer, encoder.batcher.pad_id
    for indices, ids, mask, types in reference_batches(tokenizer, pad_id, texts, 8):
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        (vectors,) = encoder.session.run([OUTPUT_NAME], {k: v for k, v in feeds.items() if k in names})
        want[indices] = vectors
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
