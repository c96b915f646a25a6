"""The ASGI app in-process over a fake model: failures inside the model, loading, token counts."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from embedkit.serve.app import create_app  # noqa: E402
from embedkit.serve.engine import Engine, ServedModel  # noqa: E402
from embedkit.serve.settings import ServeConfig  # noqa: E402


class FakeTokenizer:
    """One token per word plus two, truncated at 8, as a BERT tokenizer with max length 8 counts."""

    def encode_batch(self, texts: list[str]):
        out = []
        for text in texts:
            n = len(text.split()) + 2
            out.append(SimpleNamespace(ids=[0] * min(n, 8), overflowing=[1] if n > 8 else []))
        return out


class FakeEncoder:
    backend, device, precision, dim, max_seq_length = "fake", "cpu", "fp32", 2, 8

    def __init__(self) -> None:
        self.path = Path("/models/fake-model")
        self.batcher = SimpleNamespace(tokenizer=FakeTokenizer())

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        if any("boom" in t for t in texts):
            raise RuntimeError("the model broke\nsecond line")
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch):
    gate = threading.Event()

    def load(config):
        assert gate.wait(10)
        return ServedModel(FakeEncoder())

    monkeypatch.setattr(ServedModel, "load", staticmethod(load))
    return gate


def test_loading_then_ready_then_a_model_failure_is_a_json_500(loaded: threading.Event):
    engine = Engine(ServeConfig(max_wait_ms=0))
    with TestClient(create_app(engine), raise_server_exceptions=False) as client:
        assert client.get("/health").status_code == 503
        early = client.post("/v1/embeddings", json={"input": "x"})
        assert early.status_code == 503 and early.headers["Retry-After"] == "1"
        loaded.set()
        for _ in range(200):
            if client.get("/health").status_code == 200:
                break
            threading.Event().wait(0.02)
        ok = client.post("/v1/embeddings", json={"input": ["one two", "a b c d e f g h i"]})
        assert ok.status_code == 200
        body = ok.json()
        assert [d["embedding"] for d in body["data"]] == [[7.0, 1.0], [17.0, 1.0]]
        assert body["usage"]["prompt_tokens"] == 4 + 8 and ok.headers["X-Embedkit-Truncated"] == "1"
        assert body["model"] == "fake-model"

        broken = client.post("/v1/embeddings", json={"input": ["boom"]})
        assert broken.status_code == 500
        error = broken.json()["error"]
        assert (
            error["type"] == "server_error"
            and error["message"] == "internal error: RuntimeError: the model broke"
        )
        assert "Traceback" not in broken.text
        assert client.post("/v1/embeddings", json={"input": ["fine again"]}).status_code == 200
