"""`load_encoder`: one interface over torch folders and ONNX exports; devices checked up front."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from embedkit.encode.loading import Encoder, load_encoder
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions


@pytest.fixture(scope="module")
def tiny_onnx(tiny_bert, tmp_path_factory):
    """The tiny BERT exported to ONNX (skipped until `embedkit.export.export_model` exists)."""
    if importlib.util.find_spec("embedkit.export.pipeline") is None:
        pytest.skip("embedkit.export.export_model is not available yet")
    from embedkit.export.pipeline import export_model

    out = tmp_path_factory.mktemp("tiny-onnx") / "onnx"
    export_model(tiny_bert, out, progress=False)
    return out


def test_torch_folder_opens_with_torch(tiny_bert, sentences):
    encoder = load_encoder(tiny_bert, device="cpu")
    assert isinstance(encoder, Encoder)
    assert encoder.backend == "torch"
    assert (encoder.dim, encoder.max_seq_length) == (32, 64)
    vectors = encoder.encode(sentences)
    assert vectors.dtype == np.float32 and vectors.shape == (len(sentences), 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # the folder's Normalize


def test_onnx_folder_opens_with_onnxruntime_and_matches_torch(tiny_bert, tiny_onnx, sentences):
    onnx = load_encoder(tiny_onnx, device="cpu")
    torch_encoder = load_encoder(tiny_bert, device="cpu")
    assert onnx.backend == "onnx"
    assert str(onnx.device) == "cpu"
    assert onnx.dim == torch_encoder.dim
    assert onnx.fingerprint == torch_encoder.fingerprint  # the export records its source's
    np.testing.assert_allclose(onnx.encode(sentences), torch_encoder.encode(sentences), atol=1e-4)


def test_onnx_path_does_not_import_torch(tiny_onnx):
    code = (
        "import sys; from embedkit.encode.loading import load_encoder; "
        f"e = load_encoder({str(tiny_onnx)!r}, device='cpu'); e.encode(['a test']); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_cuda_without_cuda_is_an_input_error(tiny_bert):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError, match="cuda"):
        load_encoder(tiny_bert, device="cuda")


def test_cuda_without_cuda_is_an_input_error_for_onnx(tiny_onnx):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with pytest.raises(InputError, match="CUDA was requested"):
        load_encoder(tiny_onnx, device="cuda")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "gpu"}, "unknown device 'gpu'"),
        ({"device": "cuda:x"}, "unknown device"),
        ({"precision": "bf16"}, "unknown precision 'bf16'"),
        ({"precision": "int8"}, "precision int8 needs an ONNX export"),
    ],
)
def test_bad_options_are_rejected(tiny_bert, kwargs, message):
    with pytest.raises(InputError, match=message):
        load_encoder(tiny_bert, **kwargs)


def test_unknown_keyword_is_rejected(tiny_bert):
    with pytest.raises(TypeError, match="pooling"):
        load_encoder(tiny_bert, pooling="cls")


def test_missing_or_non_model_folder(tmp_path):
    with pytest.raises(InputError, match="model folder not found"):
        load_encoder(tmp_path / "nope")
    with pytest.raises(InputError, match="not a model folder"):
        load_encoder(tmp_path)


def test_a_torch_built_index_is_searched_with_the_onnx_export(tiny_bert, tiny_onnx, tmp_path, sentences):
    from typer.testing import CliRunner

    from embedkit import SearchIndex, build_index
    from embedkit.cli.app import app

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n")
    build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(device="cpu"))
    result = CliRunner().invoke(
        app,
        ["search", str(tmp_path / "idx"), "a girl plays soccer", "--model", str(tiny_onnx), "--json"]
        + ["--device", "cpu"],
    )
    assert result.exit_code == 0, result.output
    assert "(onnx, cpu)" in result.stderr
    onnx_hits = json.loads(result.stdout)["hits"]
    with SearchIndex.load(tmp_path / "idx") as index:
        torch_hits = index.search_text("a girl plays soccer", k=10)[0]
    assert [h["id"] for h in onnx_hits] == [h.id for h in torch_hits]
    np.testing.assert_allclose([h["score"] for h in onnx_hits], [h.score for h in torch_hits], atol=1e-4)
