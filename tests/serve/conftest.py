"""Fixtures of the server tests: a tiny exported ONNX model and an index built with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_helpers import CORPUS, app_client_for

from embedkit.jobs.index_build import IndexOptions


@pytest.fixture(scope="session")
def tiny_onnx(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random BERT exported to ONNX (fp32; max_seq_length 64, normalized in the graph)."""
    pytest.importorskip("onnxruntime")
    from embedkit.export import export_model

    return export_model(
        tiny_bert, tmp_path_factory.mktemp("serve-onnx") / "tiny-onnx", progress=False
    ).out_dir


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
def app_client(tiny_onnx: Path, tiny_index: Path):
    """The app over `tiny_onnx` and `tiny_index` in a Starlette TestClient, once the model is ready."""
    with app_client_for(tiny_onnx, tiny_index) as test_client:
        yield test_client
