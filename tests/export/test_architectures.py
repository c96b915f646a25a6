"""Every sentence-encoder architecture transformers offers, exported and run, against sentence-transformers.

One tiny random model per architecture (`tests/tiny_models.py`), each with a pooling of its own so
that every mode and a Dense head meet a non-BERT backbone. The reference is `SentenceTransformer`
loading the same folder: the torch backend, the exported fp32/fp16/int8 graphs and their recorded
optimization must all agree with it. The fusion counts pinned here are the ones `docs/models.md`
quotes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixture_text import SENTENCES
from tiny_models import ENCODER_ARCHITECTURES, make_tiny_encoder

pytest.importorskip("onnxruntime")
pytest.importorskip("sentence_transformers")

from embedkit.encode.onnx_backend import OnnxEncoder  # noqa: E402
from embedkit.encode.torch_backend import TorchEncoder  # noqa: E402
from embedkit.export import export_model  # noqa: E402

# (pooling, Dense output size or None) per architecture: every mode is met once.
HEADS = {
    "bert": ("mean", None),
    "distilbert": ("cls", None),
    "electra": ("max", None),
    "mpnet": ("mean", None),
    "roberta": ("weightedmean", None),
    "xlm-roberta": ("lasttoken", 16),
    "deberta-v2": ("mean_sqrt_len_tokens", None),
    "modernbert": ("cls+mean", 24),
}
# Attention operators onnxruntime 1.32's fusion pass makes in the 3-layer models (0: none of its
# attention patterns matches: MPNet adds a relative position bias, DeBERTa-v2 disentangled
# attention, ModernBERT rotary embeddings; their layer norms and activations still fuse).
ATTENTION_FUSED = {
    "bert": 3,
    "distilbert": 3,
    "electra": 3,
    "mpnet": 0,
    "roberta": 3,
    "xlm-roberta": 3,
    "deberta-v2": 0,
    "modernbert": 0,
}
TEXTS = [*SENTENCES, "a", "ÜBER 42 wing-flow (mach 2.5)!", " ".join(SENTENCES)]  # the last is truncated


# int8 operators whose input 1 is the weight of a u8 x weight product (onnxruntime's CPU kernels)
INT8_PRODUCTS = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulIntegerToFloat")


def signed_weight_products(path: Path) -> list[str]:
    """The int8 graph's matrix products whose weights are int8: u8 x s8, which CPUs without VNNI
    saturate (onnxruntime's quantization docs). Read from the file, so it holds on every CPU."""
    import onnx

    graph = onnx.load(str(path)).graph
    types = {init.name: init.data_type for init in graph.initializer}
    # an activation quantized at run time (e.g. the keys in an unfused attention) is uint8
    types |= {n.output[0]: onnx.TensorProto.UINT8 for n in graph.node if n.op_type == "DynamicQuantizeLinear"}
    return [
        node.name
        for node in graph.node
        if node.op_type in INT8_PRODUCTS and types.get(node.input[1]) != onnx.TensorProto.UINT8
    ]


def test_every_architecture_is_covered():
    assert set(HEADS) == set(ATTENTION_FUSED) == set(ENCODER_ARCHITECTURES)


@pytest.fixture(scope="module", params=ENCODER_ARCHITECTURES)
def model(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    architecture = request.param
    pooling, dense = HEADS[architecture]
    folder = make_tiny_encoder(
        tmp_path_factory.mktemp(architecture) / "model", architecture, pooling=pooling, dense=dense
    )
    reference = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    return architecture, folder, reference


def test_torch_backend_matches_sentence_transformers(model, one_thread):
    _, folder, reference = model
    ours = TorchEncoder(folder, device="cpu").encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(ours, reference, atol=2e-6, rtol=1e-5)


def test_export_at_every_precision_matches_sentence_transformers(model, tmp_path: Path, one_thread):
    architecture, folder, reference = model
    result = export_model(folder, tmp_path / "onnx", fp16=True, int8=True, progress=False)
    meta = json.loads((result.out_dir / "embedkit.json").read_text())
    assert meta["model_type"] == architecture
    assert meta["parity"]["reference"].startswith("sentence-transformers ")
    assert meta["dim"] == reference.shape[1]
    for precision, floor in (("fp32", 0.99999), ("fp16", 0.999), ("int8", 0.95)):
        got = OnnxEncoder(result.out_dir, device="cpu", precision=precision).encode(TEXTS, batch_size=4)
        assert got.shape == reference.shape
        assert np.min(np.sum(got * reference, axis=1)) >= floor, precision  # both unit length
    # every int8 product is u8 x u8: the vectors above are the ones every x86 CPU computes
    assert meta["int8"]["weight_type"] == "QUInt8"
    assert signed_weight_products(result.out_dir / "model_int8.onnx") == []
    fp32 = OnnxEncoder(result.out_dir, device="cpu").encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(fp32, reference, atol=2e-5)

    # What was optimized and how is recorded, and said in one line
    assert meta["optimization"]["plan"] == "fusions"
    assert meta["fusion"].get("Attention", 0) == ATTENTION_FUSED[architecture]
    assert meta["fusion"].get("SkipLayerNormalization", 0) >= 3
    assert ("no Attention fused" in meta["optimization"]["applied"]) == (not ATTENTION_FUSED[architecture])
