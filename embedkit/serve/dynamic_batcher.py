"""Dynamic batching: the texts of concurrent requests merged into batches for one model.

The scheme of text-embeddings-inference and infinity: each request's texts join one FIFO queue
with their token counts; a scheduler forms a batch whenever a worker thread is free, taking texts
in arrival order while the batch's tokens stay within `max_batch_tokens`. A free worker starts a
batch that is not full only once its oldest text has waited `max_wait_ms` and the last batch
ended `max_wait_ms` ago, so that requests arriving together, and the clients just answered, share
a batch; with `wait_when_idle=False` (CUDA's) it waits so only while another batch runs, and
starts at once when nothing does: the device never idles for a fixed wait. The batch runs in a
worker thread (ONNX Runtime and torch release the GIL, so the event loop keeps answering), and its
vectors are scattered back to their requests in each request's order.

Inside a batch on a CPU, texts are sorted by length and cut into groups that pad little
(`embedkit.serve.served_model.length_groups`): a padded model computes every position of the longest text,
and on 32 random Wikipedia sentences one padded call ran at half the rate of the same texts in
length groups (all-MiniLM-L6-v2, ONNX, 2 CPU cores; benchmarks/README.md).

The queue is bounded twice: by texts (`max_queue_texts`) and by tokens (`max_queue_tokens`), so
that one request of long texts cannot hold the model for a minute while every other client
waits. Beyond either bound a request is refused at once (`QueueFull`, with the seconds the queued
work should take at the measured rate, for `Retry-After`); a request larger than the whole token
budget is refused for good (`TooLarge`).

Short requests do not wait behind long ones: a request of at most `SMALL_REQUEST_TEXTS` texts
joins a lane of its own that batches take first (once a long request's texts have waited
`MAX_BYPASS_S`, short texts fill at most half of each batch, so neither lane starves), and once
the model's rate is known a batch holds about `TARGET_BATCH_S` of work, so a short request that
arrives while one runs waits that long, not a whole `max_batch_tokens` batch (on a CPU, where a
large budget only makes batches slower).

With `prepare` (a GPU's), a batch is prepared (padded to its fixed shapes) by `prepare(items,
tokens)` on a thread of its own, then run by `run_batch(prepared, tokens)`, and `in_flight` batches
may be unfinished at once: the device gets the next batch the moment it finishes one (infinity's
pipeline).

The class knows nothing of HTTP or tokenizers: it takes items (texts, or anything `run_batch`
embeds, such as the server's tokenized texts) with their token counts and a
`run_batch(items, tokens) -> float32 [n, dim]` function, so it is tested on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from embedkit.errors import InputError


class QueueFull(Exception):
    """More texts or tokens are waiting than the queue takes: answer 503, retry in `retry_after` s."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooLarge(Exception):
    """One request has more tokens than the whole queue takes: it can never be queued (413)."""


class BatcherClosed(Exception):
    """The batcher is shutting down and takes no new texts."""


# A request this small (one query, a few sentences) takes the short lane.
SMALL_REQUEST_TEXTS = 8
# How long a long request's texts may be passed by short ones before they get half of each batch.
MAX_BYPASS_S = 1.0
# A batch's work in seconds once the rate is known: what a short request may wait behind it. The
# token budget becomes min(max_batch_tokens, rate x this), and at least MIN_BATCH_TOKENS.
TARGET_BATCH_S = 0.1
MIN_BATCH_TOKENS = 256


@dataclass(frozen=True)
class BatchStats:
    """What one batch was: passed to `on_batch` after it ran (in the event loop's thread)."""

    texts: int
    tokens: int
    waited_s: float  # its oldest text's time in the queue
    run_s: float  # from the batch's start to its vectors: preparation, waiting for a worker, inference


class _Job:
    """One `embed` call: its future and the rows filled so far."""

    __slots__ = ("future", "out", "size", "left")

    def __init__(self, future: asyncio.Future[np.ndarray], size: int) -> None:
        self.future = future
        self.out: np.ndarray | None = None
        self.size = self.left = size


class _Item:
    __slots__ = ("job", "position", "text", "tokens", "arrived")

    def __init__(self, job: _Job, position: int, text: Any, tokens: int, arrived: float) -> None:
        self.job, self.position, self.text, self.tokens, self.arrived = job, position, text, tokens, arrived


class DynamicBatcher:
    """Merge concurrent `embed` calls into token-budgeted batches run by `workers` threads.

    >>> run = lambda texts, tokens: model.encode(texts)  # doctest: +SKIP
    >>> batcher = DynamicBatcher(run, max_batch_tokens=4096)  # doctest: +SKIP
    >>> await batcher.start()  # doctest: +SKIP
    >>> vectors = await batcher.embed(["a text", "another"], [4, 3])  # doctest: +SKIP
    """

    def __init__(
        self,
        run_batch: Callable[[Any, Any], np.ndarray],  # (texts, tokens), or (prepared, tokens)
        *,
        max_batch_tokens: int,
        max_wait_ms: float = 0.0,
        wait_when_idle: bool = True,
        workers: int = 1,
        max_queue_texts: int = 1 << 30,
        max_queue_tokens: int = 1 << 62,
        on_batch: Callable[[BatchStats], None] | None = None,
        prepare: Callable[[list[Any], list[int]], Any] | None = None,
        in_flight: int | None = None,
    ) -> None:
        if min(max_batch_tokens, workers, max_queue_texts, max_queue_tokens) < 1 or max_wait_ms < 0:
            raise InputError(
                "max_batch_tokens, workers, max_queue_texts and max_queue_tokens must be >= 1, "
                "max_wait_ms >= 0"
            )
        self.run_batch = run_batch
        self.prepare = prepare
        self.in_flight = max(in_flight or workers, workers)  # each worker needs a batch of its own
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.wait_when_idle = wait_when_idle
        self.workers = workers
        self.max_queue_texts = max_queue_texts
        self.max_queue_tokens = max_queue_tokens
        self.on_batch = on_batch
        self._small: deque[_Item] = deque()  # texts of requests of <= SMALL_REQUEST_TEXTS texts
        self._large: deque[_Item] = deque()  # the others
        self._queued_tokens = 0  # the tokens of the texts in both lanes
        self._rate = 0.0  # tokens a second of the batches run so far (moving average; 0: none yet)
        self._running = 0  # texts in batches that are running
        self._finished = -float("inf")  # when the last batch finished (perf_counter)
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._scheduler: asyncio.Task[None] | None = None

    # --- public -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler in the running event loop (and the worker threads)."""
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="embedkit-inference")
        self._preparer = ThreadPoolExecutor(1, thread_name_prefix="embedkit-prep") if self.prepare else None
        self._slots = asyncio.Semaphore(self.in_flight)
        self._arrived = asyncio.Event()
        self._scheduler = asyncio.create_task(self._schedule())

    @property
    def queued(self) -> int:
        """Texts waiting for a batch."""
        return len(self._small) + len(self._large)

    @property
    def queued_tokens(self) -> int:
        """Tokens of the texts waiting for a batch."""
        return self._queued_tokens

    @property
    def running(self) -> int:
        """Texts in batches that are running now."""
        return self._running

    async def embed(self, texts: Sequence[Any], tokens: Sequence[int]) -> np.ndarray:
        """float32 [len(texts), dim]: the vectors of `texts`, in their order.

        `tokens[i]` is text i's token count after truncation (it sizes batches and bounds the
        queue; a wrong count gives worse batches, never wrong vectors). Raises `QueueFull` when
        the queue cannot take the texts now, `TooLarge` when it never can, `BatcherClosed` after
        `close()`, and what `run_batch` raised for its batch.
        """
        if self._scheduler is None or self._closing:
            raise BatcherClosed("the batcher is not running")
        if len(texts) != len(tokens):
            raise ValueError(f"{len(texts)} texts but {len(tokens)} token counts")
        if not texts:
            raise ValueError("no texts to embed")
        counts = [max(1, int(n)) for n in tokens]
        total = sum(counts)
        if total > self.max_queue_tokens:
            raise TooLarge(
                f"the request has {total:,} tokens; this server queues at most {self.max_queue_tokens:,}: "
                "send fewer or shorter texts per request"
            )
        if self.queued + len(texts) > self.max_queue_texts:
            raise QueueFull(
                f"{self.queued} texts are waiting; the queue takes {self.max_queue_texts}",
                self.retry_after(),
            )
        if self._queued_tokens + total > self.max_queue_tokens:
            raise QueueFull(
                f"{self._queued_tokens:,} tokens are waiting; the queue takes {self.max_queue_tokens:,}",
                self.retry_after(),
            )
        job = _Job(self._loop.create_future(), len(texts))
        now = time.perf_counter()
        lane = self._small if len(texts) <= SMALL_REQUEST_TEXTS else self._large
        lane.extend(
            _Item(job, i, text, n, now) for i, (text, n) in enumerate(zip(texts, counts, strict=True))
        )
        self._queued_tokens += total
        self._arrived.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            # The caller was cancelled (its client went away): its queued texts leave the queue.
            if any(item.job is job for item in lane):
                kept = [item for item in lane if item.job is not job]
                lane.clear()
                lane.extend(kept)
                self._queued_tokens = sum(item.tokens for item in (*self._small, *self._large))
                self._arrived.set()  # the head may have changed
            raise

    def retry_after(self) -> int:
        """Whole seconds until the queued tokens should have run, at the rate measured so far
        (1 before any batch has run; at most 60)."""
        if self._rate <= 0:
            return 1
        return int(min(60, max(1, math.ceil(self._queued_tokens / self._rate))))

    async def close(self) -> None:
        """Take no new texts, finish every queued and running batch, stop the worker threads."""
        if self._scheduler is None:
            return
        self._closing = True
        self._arrived.set()
        await self._scheduler
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=True)
        if self._preparer is not None:
            self._preparer.shutdown(wait=True)

    # --- scheduling -------------------------------------------------------------------------

    async def _schedule(self) -> None:
        try:
            while True:
                await self._slots.acquire()
                batch = await self._next_batch()
                if batch is None:  # closing, and nothing is left
                    self._slots.release()
                    return
                if not batch:  # only cancelled texts were taken
                    self._slots.release()
                    continue
                task = asyncio.create_task(self._run(batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except BaseException as exc:
            # The scheduler never fails on its own; if it is cancelled or breaks, no queued text
            # may wait forever.
            failure = exc if isinstance(exc, Exception) else BatcherClosed("the batcher stopped")
            for lane in (self._small, self._large):
                while lane:
                    job = lane.popleft().job
                    if not job.future.done():
                        job.future.set_exception(failure)
            self._queued_tokens = 0
            raise

    async def _next_batch(self) -> list[_Item] | None:
        """Wait until the queue's head fills a batch or has waited max_wait, then take it."""
        while True:
            for lane in (self._small, self._large):
                while lane and lane[0].job.future.done():
                    self._queued_tokens -= lane.popleft().tokens  # its request was cancelled or failed
            if not self.queued:
                if self._closing:
                    return None
                self._arrived.clear()
                await self._arrived.wait()
                continue
            counts, full = self._plan()
            # Wait from the later of the oldest text's arrival and the last batch's end: the
            # clients just answered then come back into this batch, instead of the queue settling
            # into two half-size batches that alternate (one runs while the other's clients return).
            oldest = min(lane[0].arrived for lane in (self._small, self._large) if lane)
            since = max(oldest, self._finished)
            left = since + self.max_wait - time.perf_counter()
            idle = self._running == 0 and not self.wait_when_idle  # the device waits for nothing
            if full or left <= 0 or idle or self._closing:
                break
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
        batch = [lane.popleft() for lane, count in counts for _ in range(count)]
        self._queued_tokens -= sum(item.tokens for item in batch)
        return [item for item in batch if not item.job.future.done()]

    def batch_tokens(self) -> int:
        """This batch's token budget: `max_batch_tokens`, or about TARGET_BATCH_S of work at the
        rate measured so far when that is less."""
        if self._rate <= 0:
            return self.max_batch_tokens
        return min(self.max_batch_tokens, max(MIN_BATCH_TOKENS, int(self._rate * TARGET_BATCH_S)))

    def _plan(self) -> tuple[list[tuple[deque[_Item], int]], bool]:
        """How many texts of each lane's head fit the token budget (the short lane's first), and
        whether the budget (rather than the end of the queue) stops there. The first text always
        fits. Once the long lane's head has waited MAX_BYPASS_S, short texts take at most half."""
        budget = self.batch_tokens()
        starved = bool(self._large) and time.perf_counter() - self._large[0].arrived > MAX_BYPASS_S
        counts: list[tuple[deque[_Item], int]] = []
        taken = total = 0
        for lane, limit in ((self._small, budget // 2 if starved else budget), (self._large, budget)):
            count = 0
            for item in lane:
                if taken and total + item.tokens > limit:
                    break
                count, taken, total = count + 1, taken + 1, total + item.tokens
            counts.append((lane, count))
        return counts, total >= budget or any(count < len(lane) for lane, count in counts)

    async def _run(self, batch: list[_Item]) -> None:
        self._running += len(batch)
        start = time.perf_counter()
        texts = [item.text for item in batch]
        tokens = [item.tokens for item in batch]
        ran = 0.0  # the model's run alone, not the preparation or the wait for a worker
        try:
            work: Any = texts
            if self._preparer is not None and self.prepare is not None:
                work = await self._loop.run_in_executor(self._preparer, self.prepare, texts, tokens)
            vectors, ran = await self._loop.run_in_executor(self._executor, self._timed_run, work, tokens)
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or len(vectors) != len(batch):
                raise RuntimeError(f"the model returned {vectors.shape} for a batch of {len(batch)} texts")
        except Exception as exc:
            for item in batch:
                if not item.job.future.done():
                    item.job.future.set_exception(exc)
        else:
            self._scatter(batch, vectors)
        finally:
            self._running -= len(batch)
            self._finished = time.perf_counter()
            self._slots.release()
        if ran > 0:
            rate = sum(tokens) / ran
            self._rate = rate if self._rate <= 0 else 0.8 * self._rate + 0.2 * rate
        if self.on_batch is not None:
            self.on_batch(
                BatchStats(
                    texts=len(batch),
                    tokens=sum(tokens),
                    waited_s=start - min(item.arrived for item in batch),
                    run_s=time.perf_counter() - start,
                )
            )

    def _timed_run(self, work: Any, tokens: list[int]) -> tuple[np.ndarray, float]:
        start = time.perf_counter()
        vectors = self.run_batch(work, tokens)
        return vectors, time.perf_counter() - start

    @staticmethod
    def _scatter(batch: list[_Item], vectors: np.ndarray) -> None:
        for item, vector in zip(batch, vectors, strict=True):
            job = item.job
            if job.future.done():
                continue
            if job.out is None:
                job.out = np.empty((job.size, vectors.shape[1]), dtype=np.float32)
            job.out[item.position] = vector
            job.left -= 1
            if job.left == 0:
                job.future.set_result(job.out)
