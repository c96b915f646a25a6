"""Starting and stopping `embedkit serve`: 503 while loading, draining on SIGTERM, exit codes, options."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

from serve_helpers import Server  # noqa: E402


def queue_depth(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("embedkit_queue_depth "):
            return float(line.split()[1])
    raise AssertionError("no embedkit_queue_depth in /metrics")


def test_503_while_loading_then_sigterm_drains_the_request_in_flight(
    tiny_index: Path, tiny_onnx: Path, tiny_bert: Path
):
    """Served from --index alone (the index's own model); every batch waits 1.5 s for company, so
    the warm-up batch leaves time to see a 503, and a request is surely in flight at SIGTERM."""
    from embedkit import load_encoder

    server = Server(["--index", str(tiny_index), "--max-wait-ms", "1500"])
    try:
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            try:
                first = httpx.get(f"{server.url}/health")
            except httpx.TransportError:  # bound, not yet listening
                time.sleep(0.02)
        assert first is not None and first.status_code == 503, first
        early = httpx.post(f"{server.url}/v1/embeddings", json={"input": "too early"})
        if early.status_code == 503:  # unless the warm-up finished in between
            assert early.json()["error"]["type"] == "service_unavailable" and "Retry-After" in early.headers
        server.wait_ready()
        assert f"model {tiny_bert.name} (onnx, cpu" in "".join(server.stdout)  # the index's model

        # A client that gives up while its texts wait: they are dropped, never embedded.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/embeddings", json={"input": ["given up"]}, timeout=0.5)
        deadline = time.monotonic() + 30
        while 'status="499"' not in httpx.get(f"{server.url}/metrics").text and time.monotonic() < deadline:
            time.sleep(0.05)
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'embedkit_requests_total{route="/v1/embeddings",status="499"} 1' in metrics
        assert "embedkit_texts_embedded_total 0" in metrics and queue_depth(server.url) == 0

        results: list[httpx.Response] = []
        request = threading.Thread(
            target=lambda: results.append(
                httpx.post(f"{server.url}/v1/embeddings", json={"input": ["drain me", "and me"]}, timeout=60)
            )
        )
        request.start()
        deadline = time.monotonic() + 30
        while queue_depth(server.url) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert queue_depth(server.url) == 2  # queued: the batch waits for company
        code = server.stop()
        request.join(60)
    finally:
        if server.process.poll() is None:
            server.process.kill()
    assert code == 0, server.output()
    assert len(results) == 1 and results[0].status_code == 200, results
    got = np.array([d["embedding"] for d in results[0].json()["data"]])
    expected = load_encoder(tiny_onnx, device="cpu").encode(["drain me", "and me"])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    out = "".join(server.stdout)
    assert "stopping" in out and out.rstrip().endswith("stopped")
    assert "Traceback" not in server.output()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "embedkit.cli.app", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_folder_that_is_not_a_model_exits_2_before_the_url(tmp_path: Path, tiny_index: Path):
    result = run_cli(str(tmp_path / "missing"), "--port", "0", "--device", "cpu")
    assert result.returncode == 2, result.stderr
    assert (result.stdout, result.stderr) == (
        "",
        f"error: model folder not found: {tmp_path / 'missing'} (a hub model is named ORG/NAME)\n",
    )
    result = run_cli("--index", str(tiny_index), str(tmp_path), "--port", "0", "--device", "cpu")
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.startswith(f"error: not a model folder: {tmp_path}"), result.stderr


def test_a_port_in_use_exits_2(tiny_onnx: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(str(tiny_onnx), "--port", str(port), "--device", "cpu")
    assert result.returncode == 2
    assert (
        result.stderr.strip().startswith("error: cannot listen on 127.0.0.1")
        and "Traceback" not in result.stderr
    )


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list:
    """The ServeConfig the command builds, with the server itself replaced."""
    import embedkit.serve.server

    configs: list = []
    monkeypatch.setattr(embedkit.serve.server, "run_server", lambda config, echo: configs.append(config))
    monkeypatch.delenv("EMBEDKIT_API_KEY", raising=False)
    return configs


def test_options_reach_the_server_and_a_public_host_without_key_warns(captured: list):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    runner = CliRunner()
    args = [
        "serve",
        "m",
        "--host",
        "0.0.0.0",
        "--max-batch-tokens",
        "512",
        "--max-wait-ms",
        "0",
        "--workers",
        "2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "warning: listening on 0.0.0.0 without an API key" in result.stderr
    config = captured[-1]
    assert (config.model, config.host, config.max_batch_tokens, config.max_wait_ms, config.workers) == (
        "m",
        "0.0.0.0",
        512,
        0.0,
        2,
    )
    assert config.api_key is None and config.port == 8000

    result = runner.invoke(app, ["serve", "m", "--host", "0.0.0.0"], env={"EMBEDKIT_API_KEY": "k"})
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert captured[-1].api_key == "k"
    result = runner.invoke(app, ["serve", "m"])
    assert "warning" not in result.stderr and captured[-1].host == "127.0.0.1"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--precision", "fp8"], "unknown precision"),
        (["--device", "tpu"], "unknown device"),
        (["--api-key", " "], "API key"),
    ],
)
def test_bad_options_exit_2_before_serving(captured: list, args: list[str], says: str):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    result = CliRunner().invoke(app, ["serve", "m", *args])
    assert result.exit_code == 2 and result.stderr.startswith("error:") and says in result.stderr
    assert captured == []
