"""The queue bounded by tokens (503 with Retry-After, 413 for a request larger than the bound), short
requests ahead of long ones, and a client that leaves mid-body counted apart from server errors."""

from __future__ import annotations

import asyncio
import socket
import time

import numpy as np
import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import serving  # noqa: E402

from embedkit.serve.dynamic_batcher import DynamicBatcher, QueueFull, TooLarge  # noqa: E402


def run(coroutine):
    return asyncio.run(coroutine)


def test_the_token_bound_refuses_with_the_time_the_queue_needs() -> None:
    release = asyncio.Event()

    async def scenario():
        loop = asyncio.get_running_loop()

        def slow(items, tokens):
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()  # hold the worker
            return np.ones((len(items), 2), np.float32)

        batcher = DynamicBatcher(slow, max_batch_tokens=10, max_queue_tokens=100)
        await batcher.start()
        first = asyncio.ensure_future(batcher.embed(["a"], [10]))  # runs, holding the worker
        await asyncio.sleep(0.05)
        queued = asyncio.ensure_future(batcher.embed(["b"] * 9, [10] * 9))  # 90 tokens wait
        await asyncio.sleep(0.05)
        assert batcher.queued_tokens == 90
        with pytest.raises(QueueFull, match="90 tokens are waiting; the queue takes 100") as full:
            await batcher.embed(["c", "d"], [10, 10])
        assert full.value.retry_after >= 1
        with pytest.raises(TooLarge, match="101 tokens; this server queues at most 100"):
            await batcher.embed(["e"] * 2, [50, 51])
        fits = asyncio.ensure_future(batcher.embed(["f"], [10]))  # 90 + 10 fits
        await asyncio.sleep(0.05)
        assert batcher.queued_tokens == 100
        release.set()
        await asyncio.gather(first, queued, fits)
        assert batcher.queued_tokens == 0
        await batcher.close()

    run(scenario())


def test_a_short_request_goes_ahead_of_a_long_ones_texts() -> None:
    order: list[str] = []

    async def scenario():
        def record(items, tokens):
            order.extend(items)
            time.sleep(0.01)
            return np.ones((len(items), 2), np.float32)

        batcher = DynamicBatcher(record, max_batch_tokens=4, max_wait_ms=0)
        await batcher.start()
        long = asyncio.ensure_future(batcher.embed([f"long{i}" for i in range(20)], [1] * 20))
        await asyncio.sleep(0)
        short = asyncio.ensure_future(batcher.embed(["short"], [1]))
        await asyncio.gather(long, short)
        await batcher.close()

    run(scenario())
    # FIFO would run it last (position 20); the short lane puts it into the next batch.
    assert order.index("short") <= 8


def test_a_request_over_the_token_bound_is_a_413_over_http(tiny_onnx) -> None:
    with serving([str(tiny_onnx), "--max-queue-tokens", "300", "--max-wait-ms", "0"]) as server:
        too_big = httpx.post(f"{server.url}/v1/embeddings", json={"input": ["word " * 60] * 10}, timeout=30)
        assert too_big.status_code == 413 and "queues at most 300" in too_big.json()["error"]["message"]
        small = httpx.post(f"{server.url}/v1/embeddings", json={"input": "a short one"}, timeout=30)
        assert small.status_code == 200


def test_a_client_leaving_mid_body_is_a_499_and_one_log_line(tiny_onnx) -> None:
    with serving([str(tiny_onnx)]) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"input": "only part'
            )
            time.sleep(0.3)
        for _ in range(100):
            metrics = httpx.get(f"{server.url}/metrics").text
            if "embedkit_client_disconnects_total 1" in metrics:
                break
            time.sleep(0.05)
        assert "embedkit_client_disconnects_total 1" in metrics
        assert 'route="/v1/embeddings",status="499"' in metrics
        assert 'status="500"' not in metrics
    log = server.output()
    assert "Traceback" not in log
    assert sum("closed the connection" in line for line in log.splitlines()) == 1


def test_a_request_that_is_not_http_gets_a_json_400(tiny_onnx) -> None:
    import json

    with serving([str(tiny_onnx)]) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            conn.sendall(b"GARBAGE / NOT-HTTP\r\n\r\n")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["message"].startswith("not an HTTP request")


def test_an_app_cancelled_before_answering_answers_json_503() -> None:
    from types import SimpleNamespace

    from embedkit.serve.app import MetricsMiddleware
    from embedkit.serve.metrics import Metrics

    async def cancelled(scope, receive, send):
        raise asyncio.CancelledError

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def scenario():
        middleware = MetricsMiddleware(cancelled, SimpleNamespace(metrics=Metrics()))  # type: ignore[arg-type]
        with pytest.raises(asyncio.CancelledError):
            await middleware({"type": "http", "path": "/v1/embeddings", "method": "POST"}, None, send)
        return middleware.metrics.requests

    requests = run(scenario())
    assert sent[0]["status"] == 503 and b"the server stopped before answering" in sent[1]["body"]
    assert requests == {("/v1/embeddings", "503"): 1}
