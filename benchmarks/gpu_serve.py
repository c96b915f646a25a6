"""benchmarks/gpu.py's serve rows: `embedkit serve` of the model under closed-loop load.

The cells (clients x texts a request; gpu.py's `CELLS`) against one server of the benchmark's
model, precision and device, with benchmarks/serve.py's client.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

Cells = tuple[tuple[int, int], ...]  # (clients, texts a request)


def measure_serve(model: Path, texts: list[str], args: argparse.Namespace, cells: Cells) -> list[dict]:
    """The closed-loop `cells` against one `embedkit serve` of the model (benchmarks/serve.py)."""
    import serve as serve_benchmark  # benchmarks/serve.py, beside this file

    # a closed loop measures throughput, not admission: 32 clients of 64 texts queue more tokens
    # than a CPU server's default bound (65,536), which would shed them with 503s
    options = ["--precision", args.precision, "--max-queue-tokens", str(2**24), *args.serve_option]
    server = serve_benchmark.ServerProcess(str(model), options, device=args.device)
    load = argparse.Namespace(
        name="embedkit", path="/v1/embeddings", warmup=args.serve_warmup, duration=args.serve_duration
    )
    try:
        return [
            serve_benchmark.cell(server.url, texts, size, clients, load, server.process.pid)
            for clients, size in cells
        ]
    finally:
        server.stop()


def serve_rows(
    model: Path, texts: list[str], args: argparse.Namespace, cells: Cells, offline: float, row: Callable
) -> tuple[list[dict], str | None]:
    """The cells as benchmarks/gpu.py's rows (`row`: texts/s, p50/p99, share of `offline`), and
    why there are none (a server that did not start or failed a request)."""
    try:
        measured = [] if args.no_serve else measure_serve(model, texts, args, cells)
    except (SystemExit, RuntimeError, OSError) as exc:  # a server that did not start or failed a request
        error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"  serve: {error}", flush=True)
        return [], error
    rows = []
    for cell in measured:
        clients, size = cell["clients"], cell["texts_per_request"]
        rows.append(
            row(
                f"serve_{clients}x{size}",
                f"serve, {clients} clients x {size} text{'s' if size > 1 else ''}",
                int(cell["answered"] * size),
                args.serve_duration,
                p50_ms=cell["p50_ms"],
                p99_ms=cell["p99_ms"],
                of_offline=cell["texts_per_s"] / offline,
            )
        )
    return rows, None
