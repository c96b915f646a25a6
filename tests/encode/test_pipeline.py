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
from embedkit.encode.batching import TokenBatcher, encode_in_order, pad_encodings, prefetch_for, run_ahead

TEXTS = [" ".join(["flow"] * (1 + i % 13) + [f"w{i}"]) for i in range(48)]


class RecordingBatcher(TokenBatcher):
    """A TokenBatcher that logs each tokenization call and each batch it hands out, with its thread."""

    def __init__(self, model_dir, events: list) -> None:
        super().__init__(model_dir, 64)
        self.events = events
        tokenizer = self.tokenizer

        class Tokenizer:
            def encode_batch(_, texts):
                events.append(("tokenize", len(texts), threading.current_thread().name))
                return tokenizer.encode_batch(texts)

        self.tokenizer = Tokenizer()

    def batches(self, texts, batch_size, shapes=None, ahead=False):
        for k, batch in enumerate(super().batches(texts, batch_size, shapes, ahead)):
            self.events.append(("ready", k, threading.current_thread().name))
            yield batch


def run_recorded(tiny_bert, monkeypatch, prefetch: int, patience: float) -> list:
    monkeypatch.setattr(batching, "CHUNK_TEXTS", 8)  # 48 texts in 6 chunks of 2 batches of 4
    events: list = []
    batcher = RecordingBatcher(tiny_bert, events)
    runs = iter(range(100))

    def sleepy_model(batch):
        k = next(runs)
        events.append(("start", k))
        deadline = time.monotonic() + patience  # the device, busy
        while k + 1 < 12 and time.monotonic() < deadline and ("ready", k + 1) not in [e[:2] for e in events]:
            time.sleep(0.002)
        events.append(("end", k))
        return np.stack([batch.attention_mask.sum(1), batch.input_ids[:, 1]], 1).astype(np.float32)

    out = encode_in_order(batcher, TEXTS, 4, 2, sleepy_model, prefetch=prefetch)
    # the vectors are in the caller's order: each text's own length and first token, tokenized alone
    reference = TokenBatcher(tiny_bert, 64).tokenizer
    expected = [[len(ids), ids[1]] for ids in (reference.encode(t).ids for t in TEXTS)]
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32))
    return events


def position(events: list, *key) -> int:
    return next(i for i, event in enumerate(events) if event[: len(key)] == key)


def test_the_next_batches_are_tokenized_and_padded_while_one_runs(tiny_bert, monkeypatch):
    events = run_recorded(tiny_bert, monkeypatch, prefetch=2, patience=30)
    batches = sum(1 for e in events if e[0] == "start")
    assert batches == 12
    # batches are padded on the worker; chunks tokenized there, or (the next one) on its own thread
    assert all(thread == "embedkit-tokenize" for kind, *_, thread in events if kind == "ready")
    tokenizing = [thread for kind, *_, thread in events if kind == "tokenize"]
    assert all(thread.startswith("embedkit-tokenize") for thread in tokenizing)
    assert any(thread.startswith("embedkit-tokenize-ahead") for thread in tokenizing)
    for k in range(batches - 1):
        assert position(events, "ready", k + 1) < position(events, "end", k)
    # each chunk after the first is tokenized before the last batch of the chunk before it ends
    tokenized = [i for i, e in enumerate(events) if e[0] == "tokenize"]
    assert len(tokenized) == 6
    for chunk in range(1, 6):
        assert tokenized[chunk] < position(events, "end", 2 * chunk - 1)
    # the queue is bounded: while batch k runs, at most batches k+1..k+3 are ready
    # (2 queued, 1 waiting to be queued)
    for k in range(batches):
        ready = [e[1] for e in events[: position(events, "start", k)] if e[0] == "ready"]
        assert max(ready) <= k + 3


def test_without_prefetch_every_step_waits_for_the_one_before(tiny_bert, monkeypatch):
    # the same recording can fail: in one thread, batch k+1 is ready only after batch k has run
    events = run_recorded(tiny_bert, monkeypatch, prefetch=0, patience=0.05)
    assert all(thread == threading.current_thread().name for kind, *_, thread in events if kind == "ready")
    for k in range(11):
        assert position(events, "end", k) < position(events, "ready", k + 1)


def test_batches_run_ahead_on_cuda_only():
    assert [prefetch_for(d) for d in ("cuda", "cuda:1", "cpu")] == [2, 2, 0]


def test_run_ahead_raises_the_workers_error_and_stops_with_its_consumer():
    def failing():
        yield 1
        raise ValueError("bad input in the worker")

    with pytest.raises(ValueError, match="bad input in the worker"):
        list(run_ahead(failing(), 2))

    produced = []

    def endless():
        for i in range(10**6):
            produced.append(i)
            yield i

    for item in run_ahead(endless(), 2):
        if item == 3:
            break
    time.sleep(0.1)
    assert len(produced) <= 3 + 2 + 2  # consumed, queued, one in hand; then the worker stopped
    assert not any(t.name == "embedkit-tokenize" for t in threading.enumerate())


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
