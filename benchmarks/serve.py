"""Serving speed: `embedkit serve` under closed-loop load, against offline `encoder.encode`.

    .venv/bin/python benchmarks/serve.py --model MODEL_ONNX [--duration 10] [--json out.json]
    .venv/bin/python benchmarks/serve.py --model MODEL_ONNX --tune        # batching settings grid
    .venv/bin/python benchmarks/serve.py --model MODEL_ONNX --grouping    # padded batch vs length groups
    .venv/bin/python benchmarks/serve.py --model MODEL_ONNX --mixed       # short requests beside long ones
    .venv/bin/python benchmarks/serve.py --model MODEL_ONNX --url http://127.0.0.1:7997 --name infinity

Sentences: the Wikipedia sample of ../shared/data (shuffled, seed 0). For each concurrency (1, 8,
32, 128) and request size (1 or 16 sentences), that many clients each send a request, wait for
its answer and send the next (closed loop) for `--warmup` + `--duration` seconds; requests
answered in the last `--duration` seconds give requests/s, texts/s and p50/p99 latency. The
offline rate is `encoder.encode(texts)` (length-sorted batches of 64, the same model and
precision) on the same sentences, measured before and after the server cells (their mean is the
reference; both are printed, since other jobs on the machine move it).

The load generator is a minimal HTTP/1.1 keep-alive client on asyncio (request bodies built in
advance, responses checked for status 200 and length only), so that it takes little of the CPU
the server needs: client and server share this machine's cores. `--url` measures a server
already running (any OpenAI-compatible /v1/embeddings, e.g. infinity) instead of starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CONCURRENCY = (1, 8, 32, 128)
SIZES = (1, 16)


def sentences(count: int) -> list[str]:
    path = DATA / "corpora" / "wiki1m-sample.txt"
    lines = list(dict.fromkeys(line.strip() for line in path.open(encoding="utf-8") if line.strip()))
    random.Random(0).shuffle(lines)
    return lines[:count]


def offline_rate(
    model: str, texts: list[str], precision: str | None, seconds: float = 8.0
) -> tuple[float, float]:
    """texts/s and texts per CPU-second of `encode` over `texts` (repeated for `seconds`)."""
    from embedkit import load_encoder

    encoder = load_encoder(model, device="cpu", precision=precision)
    encoder.encode(texts[:64])
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        encoder.encode(texts)
        done += len(texts)
    return done / (time.perf_counter() - start), done / (time.process_time() - cpu)


def grouping(model: str, texts: list[str], precision: str | None, size: int = 32) -> None:
    """Texts/s of random batches of `size` run as one padded call, and in length groups
    (`embedkit.serve.served_model.length_groups`), against length-sorted batches of 64."""
    from embedkit import load_encoder
    from embedkit.serve.served_model import length_groups

    encoder = load_encoder(model, device="cpu", precision=precision)
    lengths = [len(e.ids) for e in encoder.batcher.tokenizer.encode_batch(texts)]
    batches = [list(range(i, min(i + size, len(texts)))) for i in range(0, len(texts), size)]
    encoder.encode(texts[:64])

    def rate(run) -> float:
        start = time.perf_counter()
        run()
        return len(texts) / (time.perf_counter() - start)

    def grouped(max_padding: float) -> None:
        for batch in batches:
            for group in length_groups([lengths[i] for i in batch], max_padding):
                encoder.encode([texts[batch[i]] for i in group], batch_size=len(group))

    for repeat in range(2):
        figures = {
            "sorted, batches of 64": rate(lambda: encoder.encode(texts, batch_size=64)),
            f"random {size}, one padded call": rate(
                lambda: [encoder.encode([texts[i] for i in b], batch_size=len(b)) for b in batches]
            ),
            **{
                f"random {size}, groups padded <= {p:.0%}": rate(lambda p=p: grouped(p))
                for p in (0.1, 0.25, 0.5)
            },
        }
        print(f"pass {repeat + 1}: " + " | ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)


def cpu_seconds(pid: int | None) -> float | None:
    """CPU time (user + system, all threads) of process `pid` so far, from /proc."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerProcess:
    """`embedkit serve MODEL --port 0 --device DEVICE` with the given options, until `stop()`."""

    def __init__(self, model: str, options: list[str], device: str = "cpu") -> None:
        embedkit = Path(sys.executable).with_name("embedkit")
        command = [str(embedkit), "serve", model, "--port", "0", "--device", device, *options]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.process.stdout is not None
        # the address line may come after warnings (a GPU provider's, say): read up to it
        seen: list[str] = []
        for line in self.process.stdout:
            seen.append(line)
            match = re.search(r"(http://\S+)", line)
            if match:
                break
        else:
            raise SystemExit(f"the server did not start: {''.join(seen[-20:])}")
        self.url = match.group(1)
        # keep reading its output, so that a full pipe never blocks the server
        threading.Thread(target=self.process.stdout.read, daemon=True).start()
        deadline = time.monotonic() + 300  # a GPU server may warm its shapes up before it is ready
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health") as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the server did not become ready")

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(60)


def request_bytes(url: str, texts: list[str], size: int, model: str, path: str) -> list[bytes]:
    """Whole HTTP requests of `size` sentences each, built once."""
    parts = urlsplit(url)
    out = []
    for start in range(0, len(texts) - size + 1, size):
        body = json.dumps({"input": texts[start : start + size], "model": model}).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append(head + body)
    return out


async def read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
    if length is None:
        raise RuntimeError("the benchmark client needs Content-Length responses")
    await reader.readexactly(int(length.group(1)))
    return status


async def closed_loop(url: str, requests: list[bytes], clients: int, warmup: float, duration: float):
    """Requests answered in the window, their latencies, and all answered (with the warm-up)."""
    parts = urlsplit(url)
    start = time.perf_counter()
    window, end = start + warmup, start + warmup + duration
    latencies: list[float] = []
    answered = [0]  # all requests answered, warm-up included

    async def client(index: int) -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        i = index
        try:
            while time.perf_counter() < end:
                sent = time.perf_counter()
                writer.write(requests[i % len(requests)])
                status = await read_response(reader)
                if status != 200:
                    raise RuntimeError(f"status {status}")
                done = time.perf_counter()
                answered[0] += 1
                if window <= done <= end:
                    latencies.append(done - sent)
                i += clients
        finally:
            writer.close()

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.wait(tasks, timeout=end - time.perf_counter())
    for task in tasks:
        task.cancel()  # a request still out is abandoned; the server drops its queued texts
    results = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, asyncio.CancelledError)]
    if failures:
        raise failures[0]
    return len(latencies), latencies, answered[0]


async def beside(url: str, short: list[bytes], long: list[bytes], clients: int, args) -> tuple[int, list]:
    """One client's single-sentence requests while `clients` others send long ones (closed loops)."""
    alone, background = await asyncio.gather(
        closed_loop(url, short, 1, args.warmup, args.duration),
        closed_loop(url, long, clients, args.warmup, args.duration),
    )
    return alone[0], alone[1]


def mixed(url: str, texts: list[str], args: argparse.Namespace) -> dict:
    """p50/p99 of a one-sentence request alone, then beside 8 clients sending 64 sentences each."""
    short = request_bytes(url, texts, 1, args.name, args.path)
    long = request_bytes(url, texts, 64, args.name, args.path)
    row = {}
    for label, clients in (("alone", 0), ("beside 8 x 64", 8)):
        if clients:
            count, latencies = asyncio.run(beside(url, short, long, clients, args))
        else:
            count, latencies, _ = asyncio.run(closed_loop(url, short, 1, args.warmup, args.duration))
        wait_idle(url)
        latencies.sort()
        p50 = 1000 * statistics.median(latencies)
        p99 = 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        row[label] = {"answered": count, "p50_ms": p50, "p99_ms": p99}
        print(f"  one sentence, {label}: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({count} answered)", flush=True)
    return row


def batch_totals(url: str) -> tuple[float, float] | None:
    """(texts, batches) run so far, from embedkit's /metrics; None for other servers."""
    try:
        with urllib.request.urlopen(f"{url}/metrics") as response:
            text = response.read().decode()
    except OSError:
        return None
    found = dict(re.findall(r"^embedkit_batch_size_(sum|count) (\S+)$", text, re.M))
    return (float(found["sum"]), float(found["count"])) if len(found) == 2 else None


def wait_idle(url: str, timeout: float = 120.0) -> None:
    """Until the server has no texts queued or running (embedkit's /metrics; others: a pause)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/metrics") as response:
                text = response.read().decode()
        except OSError:
            time.sleep(2.0)
            return
        values = dict(re.findall(r"^(embedkit_(?:queue_depth|texts_running)) (\S+)$", text, re.M))
        if not values:
            time.sleep(2.0)
            return
        if all(float(v) == 0 for v in values.values()):
            return
        time.sleep(0.1)


def cell(
    url: str, texts: list[str], size: int, clients: int, args: argparse.Namespace, pid: int | None
) -> dict:
    requests = request_bytes(url, texts, size, args.name, args.path)
    before = batch_totals(url)
    cpu_before = cpu_seconds(pid)
    count, latencies, answered = asyncio.run(closed_loop(url, requests, clients, args.warmup, args.duration))
    cpu_after = cpu_seconds(pid)
    wait_idle(url)
    after = batch_totals(url)
    # texts answered per CPU-second the server used in the whole cell (warm-up and window)
    cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    per_cpu_s = answered * size / cpu if cpu else None
    mean_batch = (after[0] - before[0]) / max(1.0, after[1] - before[1]) if before and after else None
    latencies.sort()
    row = {
        "clients": clients,
        "texts_per_request": size,
        "requests_per_s": count / args.duration,
        "texts_per_s": count * size / args.duration,
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else None,
        "answered": count,
        "mean_batch_texts": mean_batch,  # over warm-up and window (embedkit only)
        "texts_per_cpu_s": per_cpu_s,
    }
    p50 = f"{row['p50_ms']:8.1f}" if latencies else "       -"
    p99 = f"{row['p99_ms']:8.1f}" if latencies else "       -"
    print(
        f"  c={clients:<4d} x{size:<3d} {row['requests_per_s']:8.1f} req/s {row['texts_per_s']:8.1f} texts/s"
        f"  p50 {p50} ms  p99 {p99} ms  ({count} answered"
        + (f", mean batch {mean_batch:.1f} texts" if mean_batch is not None else "")
        + (f", {per_cpu_s:.1f} texts/CPU-s)" if per_cpu_s is not None else ")"),
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="ONNX export folder (embedkit export)")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--url", default=None, help="measure this running server instead of starting one")
    parser.add_argument(
        "--pid", type=int, default=None, help="with --url: the server's process, for CPU time"
    )
    parser.add_argument("--name", default="embedkit", help="label, and the `model` field sent")
    parser.add_argument("--path", default="/v1/embeddings", help="embeddings route (infinity: /embeddings)")
    parser.add_argument("--sentences", type=int, default=2048)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--serve-option", action="append", default=[], help="extra `embedkit serve` option")
    parser.add_argument("--tune", action="store_true", help="grid of --max-wait-ms and --max-batch-tokens")
    parser.add_argument("--no-offline", action="store_true")
    parser.add_argument(
        "--grouping", action="store_true", help="only: padded calls vs length groups, offline"
    )
    parser.add_argument("--mixed", action="store_true", help="only: short requests beside 8 long ones")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    texts = sentences(args.sentences)
    concurrency = [int(c) for c in args.concurrency.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    precision = ["--precision", args.precision] if args.precision else []
    if args.grouping:
        grouping(args.model, texts[: min(len(texts), 512)], args.precision)
        return
    report: dict = {"model": args.model, "sentences": len(texts), "duration_s": args.duration, "runs": []}
    if args.mixed:
        server = None if args.url else ServerProcess(args.model, [*precision, *args.serve_option])
        report["mixed"] = mixed(args.url or server.url, texts, args)
        if server is not None:
            server.stop()
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return

    offline = [] if args.no_offline else [offline_rate(args.model, texts, args.precision)]
    if offline:
        print(f"offline encode: {offline[0][0]:.1f} texts/s, {offline[0][1]:.1f} texts/CPU-s", flush=True)

    if args.tune:
        settings = [(w, 4096) for w in (0, 2, 5, 10)] + [(5, t) for t in (1024, 2048, 8192, 16384)]
    else:
        settings = [(None, None)]
    for wait, tokens in settings:
        options = [*precision, *args.serve_option]
        if wait is not None:
            options += ["--max-wait-ms", str(wait), "--max-batch-tokens", str(tokens)]
        label = f"max-wait-ms {wait}, max-batch-tokens {tokens}" if wait is not None else args.name
        print(f"{label}:", flush=True)
        server = None if args.url else ServerProcess(args.model, options)
        url = args.url or server.url
        pid = args.pid if args.url else server.process.pid
        rows = [cell(url, texts, size, clients, args, pid) for size in sizes for clients in concurrency]
        if server is not None:
            server.stop()
        report["runs"].append(
            {"label": label, "max_wait_ms": wait, "max_batch_tokens": tokens, "cells": rows}
        )

    if not args.no_offline:
        offline.append(offline_rate(args.model, texts, args.precision))
        reference = statistics.mean(rate for rate, _ in offline)
        per_cpu = statistics.mean(rate for _, rate in offline)
        print(
            f"offline encode: {offline[1][0]:.1f} texts/s, {offline[1][1]:.1f} texts/CPU-s "
            f"(means of before and after: {reference:.1f}, {per_cpu:.1f})"
        )
        report["offline_texts_per_s"] = [rate for rate, _ in offline]
        report["offline_texts_per_cpu_s"] = [rate for _, rate in offline]
        for run in report["runs"]:
            for row in run["cells"]:
                row["of_offline"] = row["texts_per_s"] / reference
                per = row["texts_per_cpu_s"]
                row["cpu_efficiency_of_offline"] = per / per_cpu if per else None
            single = [r for r in run["cells"] if r["texts_per_request"] == 1 and r["clients"] == 32]
            if single:
                row = single[0]
                efficiency = row["cpu_efficiency_of_offline"]
                print(
                    f"{run['label']}: 32 single-sentence clients at {row['of_offline']:.0%} of offline"
                    + (f", {efficiency:.0%} of its texts per CPU-second" if efficiency else "")
                )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
