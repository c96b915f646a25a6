"""Shared by the server tests: a corpus, and `embedkit serve` run as a real process."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

CORPUS = [
    {"_id": "w1", "title": "wing", "text": "the wing flow is high", "year": 1960},
    {"_id": "g1", "title": "", "text": "a man is playing guitar on the beach"},
    {"_id": "s1", "title": "shock", "text": "shock wave and boundary layer"},
    {"_id": "c1", "title": "", "text": "the cat eats food"},
    {"_id": "h1", "title": "heat", "text": "heat transfer at mach number five", "lab": "b"},
    {"_id": "l1", "title": "", "text": "legal contract of the court"},
    {"_id": "d1", "title": "drag", "text": "drag and lift of a small body"},
    {"_id": "e1", "title": "", "text": "the engine load is large"},
]

URL_LINE = re.compile(r"(http://\S+)")


@contextlib.contextmanager
def in_process(config):
    """The app of `config` (a `ServeConfig`) in a Starlette TestClient, once its model is ready."""
    from starlette.testclient import TestClient

    from embedkit.serve.app import create_app
    from embedkit.serve.engine import Engine

    with TestClient(create_app(Engine(config)), raise_server_exceptions=False) as test_client:
        for _ in range(1000):
            if test_client.get("/health").status_code == 200:
                break
            time.sleep(0.02)
        yield test_client


class Server:
    """`python -m embedkit.cli.app serve ARGS` on a free port; `url` once it printed it."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        command = [sys.executable, "-m", "embedkit.cli.app", "serve", *args, "--port", "0", "--device", "cpu"]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
        environment.pop("EMBEDKIT_API_KEY", None)
        environment.update(env or {})
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=Path(__file__).resolve().parents[2],
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(
            target=self._read, args=(self.process.stdout, self.stdout, True), daemon=True
        ).start()
        threading.Thread(
            target=self._read, args=(self.process.stderr, self.stderr, False), daemon=True
        ).start()
        self.url = self._wait_for_url(timeout)

    def _read(self, stream, into: list[str], forward: bool) -> None:
        for line in stream:
            into.append(line)
            if forward:
                self.lines.put(line)

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    raise RuntimeError(self._exited()) from None
                continue
            match = URL_LINE.search(line)
            if match:
                return match.group(1)
        raise RuntimeError("the server printed no URL")

    def wait_ready(self, timeout: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self._exited())
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not become ready")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit status (killed after `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def _exited(self) -> str:
        time.sleep(0.2)  # let the reader threads take the last lines
        return f"the server exited {self.process.returncode}: {''.join(self.stderr)}"

    def output(self) -> str:
        return "".join(self.stdout) + "".join(self.stderr)


@contextlib.contextmanager
def serving(args: Sequence[str]) -> Iterator[Server]:
    """`embedkit serve ARGS`, ready; stopped at the end, where it must exit 0."""
    process = Server(args)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.output()


def ready(client) -> None:
    """Wait until an in-process server (a `TestClient`) has loaded its model."""
    for _ in range(500):
        if client.get("/health").status_code == 200:
            return
        time.sleep(0.02)
    raise AssertionError(client.get("/health").text)


@contextlib.contextmanager
def app_client_for(model: Path, index: Path | None) -> Iterator[Any]:
    """The app over `model` (and `index`) in a Starlette TestClient, once the model is ready."""
    from embedkit.serve.settings import ServeConfig

    config = ServeConfig(model=str(model), index=str(index) if index else None, max_wait_ms=0)
    with in_process(config) as test_client:
        yield test_client
