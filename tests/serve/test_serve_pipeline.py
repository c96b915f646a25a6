"""The server sized for its device: batches in flight, fixed shapes, tokenization off the event loop.

The batcher's pipeline is checked with a fake model that stays busy until the next batch has been
prepared (up to a patience, so a pipeline that cannot prepare it meanwhile is seen, not a race on
a loaded machine); the device sizing with a fake encoder that says it runs on CUDA, through the
app's /info and /v1/embeddings. Order is checked, never timings.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from embedkit.encode.runtime import Runtime
from embedkit.encode.shapes import ShapePlan, row_buckets
from embedkit.serve.dynamic_batcher import DynamicBatcher
from embedkit.serve.settings import ServeConfig
from embedkit.serve.sizing import MAX_ROWS, Sizing


def run_pipeline(in_flight: int, patience: float) -> tuple[list, list]:
    events: list = []
    lock = threading.Lock()

    def log(*event) -> None:
        with lock:
            events.append(event)

    def prepare(texts: list[str], tokens: list[int]) -> list[str]:
        log("prepared", texts[0])
        return [t.upper() for t in texts]

    def run(prepared: list[str], tokens: list[int]) -> np.ndarray:
        (text,) = prepared
        log("start", text.lower())
        following = f"t{int(text[1:]) + 1}"
        deadline = time.monotonic() + patience  # the device, busy until the next batch is ready
        while following != "t6" and time.monotonic() < deadline:
            with lock:
                if ("prepared", following) in events:
                    break
            time.sleep(0.002)
        log("end", text.lower())
        return np.array([[float(text[1:]), len(text)]], dtype=np.float32)

    async def main():
        batcher = DynamicBatcher(
            run, prepare=prepare, in_flight=in_flight, max_batch_tokens=5, max_wait_ms=0, workers=1
        )
        await batcher.start()
        # one text of 5 tokens per batch; arriving together, taken in arrival order
        results = await asyncio.gather(*(batcher.embed([f"t{i}"], [5]) for i in range(6)))
        await batcher.close()
        return results

    results = asyncio.run(asyncio.wait_for(main(), 60))
    return events, results


def position(events: list, *event) -> int:
    return events.index(event)


def test_the_next_batch_is_prepared_while_one_runs_and_runs_do_not_overlap():
    events, results = run_pipeline(in_flight=2, patience=30)
    for i, vectors in enumerate(results):  # each request its own vector, through prepare and run
        np.testing.assert_array_equal(vectors, [[float(i), 2.0]])
    for k in range(5):
        assert position(events, "prepared", f"t{k + 1}") < position(events, "end", f"t{k}")
        # one inference worker: batch k+1 starts after batch k has ended
        assert position(events, "end", f"t{k}") < position(events, "start", f"t{k + 1}")
    # two in flight: batch k+2 is formed and prepared only once batch k has ended
    for k in range(4):
        assert position(events, "end", f"t{k}") < position(events, "prepared", f"t{k + 2}")


def test_one_batch_in_flight_prepares_only_after_the_run():
    # the same recording can fail: with one batch in flight nothing is prepared during a run
    events, _ = run_pipeline(in_flight=1, patience=0.05)
    for k in range(5):
        assert position(events, "end", f"t{k}") < position(events, "prepared", f"t{k + 1}")


def test_sizing_by_device():
    cpu = Sizing.resolve(ServeConfig(), "cpu", 256)
    assert (cpu.max_batch_tokens, cpu.batches_in_flight) == (4096, 1)
    assert not cpu.warmup and not cpu.prepares_ahead
    assert cpu.inline_tokenize_chars == 50_000 and cpu.max_queue_tokens == 65_536
    cuda = Sizing.resolve(ServeConfig(), "cuda:0", 256)
    assert (cuda.device, cuda.max_batch_tokens, cuda.batches_in_flight) == ("cuda", 32_768, 2)
    assert cuda.warmup
    assert cuda.prepares_ahead and cuda.inline_tokenize_chars == 2_000
    assert cpu.length_groups and cpu.wait_when_idle and not cuda.length_groups and not cuda.wait_when_idle
    asked = ServeConfig(max_batch_tokens=1000, workers=3, batches_in_flight=2, runtime=Runtime(warmup=False))
    chosen = Sizing.resolve(asked, "cuda", 256)
    assert (chosen.max_batch_tokens, chosen.workers, chosen.batches_in_flight) == (1000, 3, 3)
    assert not chosen.warmup
    with pytest.raises(Exception, match="batches-in-flight must be at least 1"):
        ServeConfig(batches_in_flight=0).check()


class FakeTokenizer:
    """One token per word plus two, truncated at 8; records whether each call ran on the event loop."""

    def __init__(self) -> None:
        self.on_loop: list[bool] = []

    def encode_batch(self, texts: list[str]):
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:  # a worker thread: no loop runs here
            self.on_loop.append(False)
        out = []
        for text in texts:
            ids = [0, *([1] * len(text.split())), 0][:8]
            out.append(SimpleNamespace(ids=ids, type_ids=[0] * len(ids), overflowing=[]))
        return out


class FakeEncoder:
    """A vector per padded row: [its attended tokens, 1]; records the shape of every run."""

    backend, precision, dim, max_seq_length = "fake", "fp16", 2, 8

    pooling, normalize_default = "mean", True

    def __init__(self, device: str) -> None:
        from embedkit.encode.batching import TokenBatcher
        from embedkit.encode.stages import EncoderStages

        self.device = device
        self.path = Path("/models/fake-model")
        self.tokenizer = FakeTokenizer()
        self.shapes = ShapePlan(8, fixed=device == "cuda")
        batcher = TokenBatcher.of(self.tokenizer, 8, 0)
        self.stages = EncoderStages(batcher, self.run_batch, self.dim, shapes=self.shapes, warm=self.warm_up)
        self.seen: list[tuple[int, int]] = []
        self.warmed: list[tuple[int, int | None]] = []

    def warm_up(self, rows: int, max_tokens: int | None = None):
        self.warmed.append((rows, max_tokens))
        return SimpleNamespace(shapes=len(self.shapes.shapes(rows, max_tokens)), seconds=0.25)

    def run_batch(self, batch):
        self.seen.append(batch.input_ids.shape)
        return np.stack([batch.attention_mask.sum(1), np.ones(len(batch.input_ids))], 1).astype(np.float32)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_info_reports_the_sizing_and_vectors_are_unchanged(monkeypatch, device):
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from embedkit.serve.app import create_app
    from embedkit.serve.engine import Engine
    from embedkit.serve.served_model import ServedModel

    encoder = FakeEncoder(device)
    monkeypatch.setattr(ServedModel, "load", staticmethod(lambda config: ServedModel(encoder)))
    engine = Engine(ServeConfig(max_wait_ms=0))
    with TestClient(create_app(engine)) as client:
        for _ in range(500):
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.02)
        info = client.get("/info").json()
        encoder.tokenizer.on_loop.clear()
        encoder.seen.clear()
        texts = ["one", "two words", "a b c d e f g h i", "x y z", "p q"]
        answer = client.post("/v1/embeddings", json={"input": texts})
    assert answer.status_code == 200
    vectors = [d["embedding"] for d in answer.json()["data"]]
    assert vectors == [[min(len(t.split()) + 2, 8), 1.0] for t in texts]  # padded rows dropped
    runtime = info["embedkit"]
    assert runtime["device"] == device and info["max_batch_tokens"] == runtime["max_batch_tokens"]
    on_loop = encoder.tokenizer.on_loop
    if device == "cpu":
        assert runtime["max_batch_tokens"] == 4096 and runtime["batches_in_flight"] == 1
        assert runtime["shapes"] == {"fixed": False, "lengths": None, "rows": None}
        assert runtime["warmup"] == {"enabled": False, "shapes": 0, "seconds": 0.0} and not encoder.warmed
        assert on_loop == [True]  # a small request: on the loop
        # by hand: 3, 4, 4, 5 tokens pad to 20 <= 1.25 x 16 (one run), the 8 alone
        assert sorted(encoder.seen) == [(1, 8), (4, 5)]
    else:
        assert runtime["max_batch_tokens"] == 32_768 and runtime["batches_in_flight"] == 2
        assert runtime["prepares_ahead"]
        assert runtime["tokenization"] == "event loop up to 2000 characters a request, else a thread"
        assert runtime["shapes"] == {"fixed": True, "lengths": [8], "rows": list(row_buckets(MAX_ROWS))}
        assert encoder.warmed == [(MAX_ROWS, 2 * 32_768)]
        assert runtime["warmup"]["enabled"] and runtime["warmup"]["shapes"] > 0
        assert on_loop == [True]  # a small request: on the loop on CUDA too
        # one run of the whole batch: 5 rows padded to the row bucket 6, the one length bucket
        assert encoder.seen == [(6, 8)]


def test_on_cuda_a_batch_starts_at_once_while_nothing_runs_and_gathers_while_one_does():
    batches: list[list[str]] = []
    gate = threading.Event()

    def run(texts: list[str], tokens: list[int]) -> np.ndarray:
        batches.append(list(texts))
        if texts[0] == "a":
            assert gate.wait(30)  # the device, busy with the first batch
        return np.ones((len(texts), 2), dtype=np.float32)

    async def main(wait_when_idle: bool, polls: int) -> tuple[bool, list]:
        batcher = DynamicBatcher(
            run, max_batch_tokens=100, max_wait_ms=60_000, wait_when_idle=wait_when_idle, in_flight=2,
            prepare=lambda texts, tokens: texts,
        )
        await batcher.start()
        first = asyncio.ensure_future(batcher.embed(["a"], [1]))
        for _ in range(polls):  # an idle device: the batch starts without the minute's wait
            await asyncio.sleep(0.01)
            if batches:
                break
        started = bool(batches)
        later = [asyncio.ensure_future(batcher.embed([t], [1])) for t in "bc"]
        await asyncio.sleep(0.05)
        pending = [b for b in batches if b != ["a"]]
        gate.set()
        await batcher.close()  # runs what is queued without waiting
        await asyncio.gather(first, *later)
        return started, pending

    started, pending = asyncio.run(asyncio.wait_for(main(False, 500), 60))
    assert started and not pending  # b and c gathered while a ran ...
    assert batches == [["a"], ["b", "c"]]  # ... into one batch
    batches.clear()
    gate.clear()
    started, _ = asyncio.run(asyncio.wait_for(main(True, 20), 60))
    assert not started  # a CPU's batch waits for others even while nothing runs
