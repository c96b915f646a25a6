"""DynamicBatcher on its own: no HTTP, no model; a fake model whose vectors are known per text."""

from __future__ import annotations

import asyncio
import random
import threading
import zlib

import numpy as np
import pytest

from embedkit.serve.dynamic_batcher import BatcherClosed, BatchStats, DynamicBatcher, QueueFull
from embedkit.serve.served_model import length_groups


def expected(text: str) -> np.ndarray:
    """The fake model's vector of one text, computed here independently of any batch."""
    return np.array([zlib.crc32(text.encode()) % 65536, len(text), 1.0], dtype=np.float32)


class FakeModel:
    """Records every batch; optionally holds each batch until `gate` is set, or fails on 'boom'."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[list[str]] = []
        self.gate = gate
        self.started = threading.Semaphore(0)

    def __call__(self, texts: list[str], tokens: list[int]) -> np.ndarray:
        self.batches.append(list(texts))
        self.started.release()
        if self.gate is not None and not self.gate.wait(10):
            raise TimeoutError("gate never opened")
        if any("boom" in text for text in texts):
            raise RuntimeError("the model failed on this batch")
        return np.stack([expected(text) for text in texts])


def run(coro, timeout: float = 20.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def started(model: FakeModel, batches: int = 1) -> None:
    """Wait until the model has been handed `batches` more batches."""
    for _ in range(batches):
        while not model.started.acquire(blocking=False):
            await asyncio.sleep(0.005)


def test_each_request_gets_its_own_vectors_in_order():
    rng = random.Random(0)
    requests = [
        [f"request {r} text {i} " + "x" * rng.randrange(30) for i in range(rng.randrange(1, 6))]
        for r in range(60)
    ]
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=64, max_wait_ms=2)
        await batcher.start()
        results = await asyncio.gather(
            *(batcher.embed(texts, [len(t) // 4 for t in texts]) for texts in requests)
        )
        await batcher.close()
        return results

    results = run(main())
    for texts, vectors in zip(requests, results, strict=True):
        np.testing.assert_array_equal(vectors, np.stack([expected(t) for t in texts]))
    assert sorted(t for batch in model.batches for t in batch) == sorted(t for r in requests for t in r)
    assert len(model.batches) < len(requests)  # requests were merged


def test_batches_respect_the_padded_token_budget():
    rng = random.Random(1)
    tokens = {f"text {i}": rng.randrange(1, 40) for i in range(200)}
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=64, max_wait_ms=1)
        await batcher.start()
        items = list(tokens.items())
        await asyncio.gather(
            *(
                batcher.embed([t for t, _ in items[i : i + 7]], [n for _, n in items[i : i + 7]])
                for i in range(0, 200, 7)
            )
        )
        await batcher.close()

    run(main())
    for batch in model.batches:
        assert len(batch) == 1 or sum(tokens[t] for t in batch) <= 64


def test_a_text_over_the_budget_runs_alone():
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=10, max_wait_ms=1)
        await batcher.start()
        vectors = await batcher.embed(["long", "short"], [50, 2])
        await batcher.close()
        return vectors

    vectors = run(main())
    np.testing.assert_array_equal(vectors, np.stack([expected("long"), expected("short")]))
    assert model.batches == [["long"], ["short"]]


def test_requests_arriving_together_share_one_batch():
    """A batch that is not full waits (here: as long as it takes) until the budget fills."""
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=100, max_wait_ms=60_000)
        await batcher.start()
        first = asyncio.create_task(batcher.embed(["a1", "a2"], [10, 10]))
        await asyncio.sleep(0.05)
        assert model.batches == []  # not full, not waited long enough: nothing ran
        second = asyncio.create_task(batcher.embed([f"b{i}" for i in range(8)], [10] * 8))
        await asyncio.gather(first, second)
        await batcher.close()

    run(main())
    assert model.batches == [["a1", "a2", *(f"b{i}" for i in range(8))]]


def test_a_lone_request_runs_once_it_has_waited():
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=1_000_000, max_wait_ms=20)
        await batcher.start()
        vectors = await batcher.embed(["alone"], [3])
        await batcher.close()
        return vectors

    np.testing.assert_array_equal(run(main()), expected("alone")[None])


def test_queued_texts_are_taken_in_arrival_order_while_the_worker_is_busy():
    gate = threading.Event()
    model = FakeModel(gate)
    stats: list[BatchStats] = []

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=30, max_wait_ms=0, on_batch=stats.append)
        await batcher.start()
        first = asyncio.create_task(batcher.embed(["first"], [5]))
        await started(model)
        later = [
            asyncio.create_task(batcher.embed(["b1", "b2"], [5, 5])),
            asyncio.create_task(batcher.embed(["c1"], [20])),  # b1 b2 c1: 30 tokens, full
            asyncio.create_task(batcher.embed(["d1"], [2])),
        ]
        await asyncio.sleep(0.02)
        assert batcher.queued == 4 and batcher.running == 1
        gate.set()
        await asyncio.gather(first, *later)
        await batcher.close()

    run(main())
    assert model.batches == [["first"], ["b1", "b2", "c1"], ["d1"]]
    assert [(s.texts, s.tokens) for s in stats] == [(1, 5), (3, 30), (1, 2)]


def test_a_failing_batch_fails_only_the_requests_in_it():
    model = FakeModel()

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=10, max_wait_ms=0)  # one text per batch
        await batcher.start()
        results = await asyncio.gather(
            batcher.embed(["fine"], [10]),
            batcher.embed(["ok", "boom"], [10, 10]),
            batcher.embed(["also fine"], [10]),
            return_exceptions=True,
        )
        await batcher.close()
        return results

    fine, failed, also_fine = run(main())
    np.testing.assert_array_equal(fine, expected("fine")[None])
    np.testing.assert_array_equal(also_fine, expected("also fine")[None])
    assert isinstance(failed, RuntimeError) and "failed" in str(failed)


def test_a_cancelled_request_is_not_run():
    gate = threading.Event()
    model = FakeModel(gate)

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=1000, max_wait_ms=0)
        await batcher.start()
        first = asyncio.create_task(batcher.embed(["first"], [3]))
        await started(model)
        cancelled = asyncio.create_task(batcher.embed(["gone1", "gone2"], [3, 3]))
        kept = asyncio.create_task(batcher.embed(["kept"], [3]))
        await asyncio.sleep(0.01)
        assert batcher.queued == 3
        cancelled.cancel()
        await asyncio.sleep(0.01)
        assert batcher.queued == 1
        gate.set()
        await asyncio.gather(first, kept)
        await batcher.close()

    run(main())
    assert model.batches == [["first"], ["kept"]]


def test_a_full_queue_refuses_and_close_drains_it():
    gate = threading.Event()
    model = FakeModel(gate)

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=1000, max_wait_ms=0, max_queue_texts=4)
        await batcher.start()
        running = asyncio.create_task(batcher.embed(["running"], [3]))
        await started(model)
        queued = asyncio.create_task(batcher.embed(["q1", "q2", "q3"], [3, 3, 3]))
        await asyncio.sleep(0.01)
        with pytest.raises(QueueFull):
            await batcher.embed(["x1", "x2"], [3, 3])  # 3 queued + 2 > 4
        closing = asyncio.create_task(batcher.close())
        await asyncio.sleep(0.01)
        with pytest.raises(BatcherClosed):
            await batcher.embed(["late"], [3])
        gate.set()
        await closing
        return await running, await queued

    running, queued = run(main())
    np.testing.assert_array_equal(queued, np.stack([expected(t) for t in ("q1", "q2", "q3")]))
    assert model.batches == [["running"], ["q1", "q2", "q3"]]


def test_two_workers_run_two_batches_at_once():
    barrier = threading.Barrier(2, timeout=10)  # breaks unless two batches run at the same time

    def model(texts: list[str], tokens: list[int]) -> np.ndarray:
        barrier.wait()
        return np.stack([expected(t) for t in texts])

    async def main():
        batcher = DynamicBatcher(model, max_batch_tokens=5, max_wait_ms=0, workers=2)
        await batcher.start()
        results = await asyncio.gather(batcher.embed(["one"], [5]), batcher.embed(["two"], [5]))
        await batcher.close()
        return results

    one, two = run(main())
    np.testing.assert_array_equal(one, expected("one")[None])
    np.testing.assert_array_equal(two, expected("two")[None])


def test_wrong_arguments():
    async def main():
        batcher = DynamicBatcher(FakeModel(), max_batch_tokens=10)
        with pytest.raises(BatcherClosed):
            await batcher.embed(["not started"], [1])
        await batcher.start()
        with pytest.raises(ValueError):
            await batcher.embed(["a", "b"], [1])
        with pytest.raises(ValueError):
            await batcher.embed([], [])
        await batcher.close()

    run(main())


def test_length_groups_sort_and_bound_the_padding():
    # by hand, at 25%: 10 11 12 pad to 36 <= 1.25 x 33; adding 30 would pad to 120 > 1.25 x 63;
    # 30 31 pad to 62 <= 1.25 x 61; adding 100 would pad to 300 > 1.25 x 161
    assert length_groups([100, 12, 30, 10, 31, 11]) == [[3, 5, 1], [2, 4], [0]]
    assert length_groups([5, 5, 5, 5]) == [[0, 1, 2, 3]]
    assert length_groups([1, 1000]) == [[0], [1]]
    assert length_groups([]) == []
    rng = random.Random(3)
    tokens = [rng.randrange(2, 130) for _ in range(300)]
    groups = length_groups(tokens, max_padding=0.1)
    assert sorted(i for g in groups for i in g) == list(range(300))
    lengths = [tokens[i] for g in groups for i in g]
    assert lengths == sorted(lengths)
    for g in groups:
        assert len(g) == 1 or len(g) * max(tokens[i] for i in g) <= 1.1 * sum(tokens[i] for i in g)
