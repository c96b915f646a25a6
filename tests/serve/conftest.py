"""Fixtures of the server tests: a tiny exported ONNX model and an index built with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_helpers import CORPUS, in_process

from embedkit.jobs.index_options import IndexOptions


@pytest.fixture(scope="session")
def tiny_index(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A flat index of `CORPUS` (titles, texts, a metadata field) built with the tiny ONNX model."""
    from embedkit import build_index

    folder = tmp_path_factory.mktemp("serve-index")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in CORPUS), encoding="utf-8")
    return build_index(corpus, folder / "index", model=tiny_onnx, options=IndexOptions(device="cpu")).path


@pytest.fixture(scope="session")
def tiny_onnx_encoder(tiny_onnx: Path):
    """`tiny_onnx` loaded as `embedkit search` loads it: the reference for the server's vectors."""
    from embedkit import load_encoder

    return load_encoder(tiny_onnx, device="cpu")


@pytest.fixture(scope="module")
def app_client(tiny_onnx: Path, tiny_index: Path, tiny_cross_encoder: Path):
    """The app over `tiny_onnx` and `tiny_index` (and `tiny_cross_encoder` for /rerank) in a Starlette
    TestClient, once the model is ready."""
    from embedkit.serve.settings import ServeConfig

    config = ServeConfig(
        model=str(tiny_onnx), index=str(tiny_index), rerank=str(tiny_cross_encoder), max_wait_ms=0
    )
    with in_process(config) as test_client:
        yield test_client
