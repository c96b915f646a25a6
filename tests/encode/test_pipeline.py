"""The tokenize-ahead pipeline: the next batches are tokenized and padded while one runs.

A fake model records when each batch starts and ends, and stays busy until the next batch is
ready (up to a patience: a pipeline that cannot prepare it meanwhile is seen waiting the whole
patience, not failing by chance on a loaded machine); the batcher records when each chunk is
tokenized and each batch is ready. Order is checked, never timings.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from embedkit.encode import batching
from embedkit.encode.batching import (
    MAX_TOKENIZER_WORKERS,
    TokenBatcher,
    check_tokenizer_workers,
    encode_in_order,
    in_order,
    pad_encodings,
    tokenizer_workers_for,
)
from embedkit.errors import InputError

TEXTS = [" ".join(["flow"] * (1 + i % 13) + [f"w{i}"]) for i in range(48)]


class RecordingBatcher(TokenBatcher):
    """A TokenBatcher that logs each tokenization call and each batch it pads, with its thread."""

    def __init__(self, model_dir, events: list) -> None:
        super().__init__(model_dir, 64)
        self.events = events
        tokenizer = self.tokenizer

        class Tokenizer:
            def encode_batch(_, texts):
                events.append(("tokenize", len(texts), threading.current_thread().name))
                return tokenizer.encode_batch(texts)

        self.tokenizer = Tokenizer()

    def pad(self, tokens, rows, **options):
        batch = super().pad(tokens, rows, **options)
        count = sum(e[0] == "padded" for e in self.events)  # batches padded so far, on any thread
        self.events.append(("padded", count, threading.current_thread().name))
        return batch


def run_recorded(tiny_bert, monkeypatch, workers: int, patience: float) -> list:
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 8)  # 48 texts in 6 chunks of 2 batches of 4
    events: list = []
    batcher = RecordingBatcher(tiny_bert, events)
    runs = iter(range(100))

    def sleepy_model(batch):
        k = next(runs)
        events.append(("start", k))
        deadline = time.monotonic() + patience  # the device, busy until batch k+1 is padded
        while k + 1 < 12 and time.monotonic() < deadline and ("padded", k + 1) not in [e[:2] for e in events]:
            time.sleep(0.002)
        events.append(("end", k))
        return np.stack([batch.attention_mask.sum(1), batch.input_ids[:, 1]], 1).astype(np.float32)

    out = encode_in_order(batcher, TEXTS, 4, 2, sleepy_model, workers=workers)
    # the vectors are in the caller's order: each text's own length and first token, tokenized alone
    reference = TokenBatcher(tiny_bert, 64).tokenizer
    expected = [[len(ids), ids[1]] for ids in (reference.encode(t).ids for t in TEXTS)]
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32))
    return events


def position(events: list, *key) -> int:
    return next(i for i, event in enumerate(events) if event[: len(key)] == key)


def test_workers_tokenize_and_pad_the_next_chunks_while_a_batch_runs(tiny_bert, monkeypatch):
    events = run_recorded(tiny_bert, monkeypatch, workers=2, patience=30)
    assert sum(1 for e in events if e[0] == "start") == 12
    assert len([e for e in events if e[0] == "tokenize"]) == 6
    # every chunk is tokenized and padded on a worker thread, never on the model's
    assert all(e[-1].startswith("embedkit-tokenize") for e in events if e[0] in ("tokenize", "padded"))
    for k in range(11):
        assert position(events, "padded", k + 1) < position(events, "end", k)
    # the queue is bounded: while batch k (of chunk k // 2) runs, at most the chunks up to
    # k // 2 + depth are padded (2 batches a chunk)
    monkeypatch.setattr(batching, "QUEUE_CHUNKS", 2)
    events = run_recorded(tiny_bert, monkeypatch, workers=2, patience=30)
    for k in range(12):
        padded = sum(1 for e in events[: position(events, "start", k)] if e[0] == "padded")
        assert padded <= 2 * (k // 2 + 3 + 1)


def test_without_workers_every_chunk_waits_for_the_batch_before(tiny_bert, monkeypatch):
    # the same recording can fail: in one thread, the next chunk is padded only after the last
    # batch of this one has run
    events = run_recorded(tiny_bert, monkeypatch, workers=0, patience=0.05)
    assert all(e[-1] == threading.current_thread().name for e in events if e[0] in ("tokenize", "padded"))
    for k in range(1, 11, 2):  # the last batch of each chunk
        assert position(events, "end", k) < position(events, "padded", k + 1)


def test_each_worker_has_a_tokenizer_of_its_own_and_the_batches_do_not_change(tiny_bert, monkeypatch):
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 4)
    used: dict[str, set[int]] = {}
    real = batching.encode_without_offsets

    def recording(tokenizer, texts):
        used.setdefault(threading.current_thread().name, set()).add(id(tokenizer))
        return real(tokenizer, texts)

    monkeypatch.setattr(batching, "encode_without_offsets", recording)
    batcher = TokenBatcher(tiny_bert, 64)
    inline = list(batcher.batches(TEXTS, 4, workers=0))
    assert used == {threading.current_thread().name: {id(batcher.tokenizer)}}
    used.clear()
    ahead = list(batcher.batches(TEXTS, 4, workers=3))
    assert len(used) >= 2 and all(len(ids) == 1 for ids in used.values())  # one tokenizer a thread
    own = [next(iter(ids)) for ids in used.values()]
    assert len(set(own)) == len(own) and id(batcher.tokenizer) not in own
    assert len(inline) == len(ahead) == 12
    for one, other in zip(inline, ahead, strict=True):
        for name in ("indices", "input_ids", "attention_mask", "token_type_ids", "lengths"):
            np.testing.assert_array_equal(getattr(one, name), getattr(other, name))


def test_tokenizer_workers_come_from_the_cores_on_cuda_only(monkeypatch):
    monkeypatch.delenv(batching.WORKERS_ENV, raising=False)
    assert [tokenizer_workers_for(d, cores=16) for d in ("cuda", "cuda:1", "cpu")] == [4, 4, 0]
    assert [tokenizer_workers_for("cuda", cores=n) for n in (1, 2, 8, 64)] == [1, 1, 2, MAX_TOKENIZER_WORKERS]
    with pytest.raises(InputError, match="tokenizer workers must be 0"):
        check_tokenizer_workers(-1)
    monkeypatch.setenv(batching.WORKERS_ENV, "3")  # the setting of every command
    assert [tokenizer_workers_for(d, cores=16) for d in ("cuda", "cpu")] == [3, 3]
    monkeypatch.setenv(batching.WORKERS_ENV, "many")
    with pytest.raises(InputError, match="EMBEDKIT_TOKENIZER_WORKERS must be a whole number"):
        tokenizer_workers_for("cpu")


def test_in_order_raises_the_workers_error_and_stops_with_its_consumer():
    def work(item):
        if item == 1:
            raise ValueError("bad input in the worker")
        return item

    with pytest.raises(ValueError, match="bad input in the worker"):
        list(in_order(work, list(range(5)), 2))

    done = []

    def slow(item):
        time.sleep(0.01)
        done.append(item)
        return item

    for item in in_order(slow, list(range(1000)), 2):
        if item == 3:
            break
    time.sleep(0.1)
    assert len(done) <= 4 + batching.QUEUE_CHUNKS  # consumed, and the queue's; then nothing more
    assert not any(t.name.startswith("embedkit-tokenize") for t in threading.enumerate())


def test_vectorised_padding_matches_a_row_by_row_reference(tiny_bert):
    from embedkit.encode.shapes import ShapePlan

    batcher = TokenBatcher(tiny_bert, 64)
    encodings = batcher.tokenizer.encode_batch(TEXTS[:7])
    rows = np.array([5, 0, 3, 6, 1])
    for shapes, max_rows, height, width in ((None, None, 5, None), (ShapePlan(64), 8, 6, 16)):
        batch = pad_encodings(encodings, rows, 7, shapes=shapes, max_rows=max_rows)
        width = width or max(len(encodings[i].ids) for i in rows)
        assert batch.input_ids.shape == (height, width) and batch.real_rows == 5
        for r, i in enumerate(rows):
            ids = encodings[i].ids
            n = len(ids)
            assert batch.input_ids[r].tolist() == ids + [7] * (width - n)
            assert batch.attention_mask[r].tolist() == [1] * n + [0] * (width - n)
            assert batch.token_type_ids[r].tolist() == encodings[i].type_ids + [0] * (width - n)
        for r in range(5, height):  # empty rows attend to one pad token
            assert batch.attention_mask[r].tolist() == [1] + [0] * (width - 1)
            assert set(batch.input_ids[r].tolist()) == {7}
