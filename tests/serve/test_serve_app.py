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
from embedkit.serve.engine import Engine  # noqa: E402
from embedkit.serve.served_model import ServedModel  # noqa: E402
from embedkit.serve.settings import ServeConfig  # noqa: E402

BOOM = 99  # the token id of the word "boom", on which the fake model fails


class FakeTokenizer:
    """One token per word plus two, truncated at 8, as a BERT tokenizer with max length 8 counts."""

    def encode_batch(self, texts: list[str]):
        out = []
        for text in texts:
            ids = [0, *(BOOM if w == "boom" else 1 for w in text.split()), 0]
            out.append(
                SimpleNamespace(
                    ids=ids[:8], type_ids=[0] * len(ids[:8]), overflowing=[1] if len(ids) > 8 else []
                )
            )
        return out


class FakeEncoder:
    """Each text's vector is [its token count, 1]: what the server sends is checkable by hand."""

    backend, device, precision, dim, max_seq_length = "fake", "cpu", "fp32", 2, 8
    pooling, normalize_default = "mean", False

    def __init__(self) -> None:
        from embedkit.encode.batching import TokenBatcher
        from embedkit.encode.stages import EncoderStages

        self.path = Path("/models/fake-model")
        self.stages = EncoderStages(TokenBatcher.of(FakeTokenizer(), 8, 0), self.run_batch, self.dim)

    def run_batch(self, batch):
        if (batch.input_ids == BOOM).any():
            raise RuntimeError("the model broke\nsecond line")
        return np.stack([batch.attention_mask.sum(1), np.ones(len(batch.input_ids))], 1).astype(np.float32)


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
        assert [d["embedding"] for d in body["data"]] == [[4.0, 1.0], [8.0, 1.0]]  # 2 + 2 and 9 + 2 cut at 8
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
