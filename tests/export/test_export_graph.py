"""The traced graph: dynamic axes, pooling and normalisation against an independent reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnxruntime = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from embedkit.encode.st_modules import SentenceModules  # noqa: E402
from embedkit.errors import InputError  # noqa: E402
from embedkit.export.onnx_graph import (  # noqa: E402
    check_architecture,
    export_graph,
    load_eager_backbone,
)
from embedkit.export.optimize import fuse_graph  # noqa: E402


def reference(
    model_dir: Path, ids: np.ndarray, mask: np.ndarray, pooling: str, normalize: bool
) -> np.ndarray:
    """Hugging Face forward + numpy pooling: written apart from the code under test."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        hidden = model(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
        ).last_hidden_state
    hidden = hidden.numpy().astype(np.float64)
    if pooling == "cls":
        vectors = hidden[:, 0]
    else:
        weights = mask[:, :, None].astype(np.float64)
        vectors = (hidden * weights).sum(1) / weights.sum(1)
    if normalize:
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def random_batch(vocab_size: int, batch: int, seq: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab_size, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    for row in range(1, batch):  # ragged lengths: padding must not leak into the pooled vector
        mask[row, rng.integers(1, seq + 1) :] = 0
    return ids, mask


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path, tiny_bert_no_types: Path) -> dict:
    out = tmp_path_factory.mktemp("graphs")
    graphs = {}
    for name, folder, pooling, normalize in (
        ("bert", tiny_bert, "mean", True),
        ("distilbert", tiny_bert_no_types, "cls", False),
    ):
        backbone = load_eager_backbone(folder)
        raw = out / f"{name}.onnx"
        modules = SentenceModules((pooling,), (), False, int(backbone.config.hidden_size))
        info = export_graph(backbone, raw, modules=modules, normalize=normalize, opset=17)
        fused = out / f"{name}_fused.onnx"
        fusion = fuse_graph(raw, fused, num_heads=info.num_attention_heads, hidden_size=info.hidden_size)
        graphs[name] = (folder, info, raw, fused, fusion, int(backbone.config.vocab_size))
    return graphs


@pytest.mark.parametrize("name", ["bert", "distilbert"])
@pytest.mark.parametrize("which", ["raw", "fused"])
@pytest.mark.parametrize(("batch", "seq"), [(1, 5), (7, 5), (1, 40), (7, 40)])
def test_graph_matches_reference_on_dynamic_shapes(
    exported: dict, name: str, which: str, batch: int, seq: int
):
    folder, info, raw, fused, _, vocab_size = exported[name]
    session = onnxruntime.InferenceSession(
        str(raw if which == "raw" else fused), providers=["CPUExecutionProvider"]
    )
    ids, mask = random_batch(vocab_size, batch, seq, seed=batch * 100 + seq)
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in info.input_names:
        feeds["token_type_ids"] = np.zeros_like(ids)
    (out,) = session.run(["sentence_embedding"], feeds)
    expected = reference(folder, ids, mask, info.pooling, info.normalize)
    assert out.shape == (batch, info.dim)
    np.testing.assert_allclose(out, expected, atol=2e-5, rtol=1e-4)


def test_inputs_follow_the_model(exported: dict):
    bert_info, distil_info = exported["bert"][1], exported["distilbert"][1]
    assert bert_info.input_names == ("input_ids", "attention_mask", "token_type_ids")
    assert distil_info.input_names == ("input_ids", "attention_mask")
    for name in ("bert", "distilbert"):
        session = onnxruntime.InferenceSession(str(exported[name][3]), providers=["CPUExecutionProvider"])
        assert tuple(i.name for i in session.get_inputs()) == exported[name][1].input_names
        assert [o.name for o in session.get_outputs()] == ["sentence_embedding"]


def test_fused_graph_has_attention_fusions(exported: dict):
    # 4 layers in the tiny models: one fused Attention and two SkipLayerNorms per layer.
    for name in ("bert", "distilbert"):
        fusion = exported[name][4]
        assert fusion.get("Attention") == 4
        assert fusion.get("SkipLayerNormalization") == 8


def test_token_embeddings_output(tmp_path: Path, tiny_bert: Path):
    backbone = load_eager_backbone(tiny_bert)
    path = tmp_path / "tokens.onnx"
    modules = SentenceModules(("mean",), (), False, int(backbone.config.hidden_size))
    info = export_graph(backbone, path, modules=modules, normalize=True, opset=17, token_embeddings=True)
    assert info.output_names == ("sentence_embedding", "token_embeddings")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids, mask = random_batch(int(backbone.config.vocab_size), 3, 9, seed=1)
    sentence, tokens = session.run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
    )
    assert tokens.shape == (3, 9, info.dim)
    # The sentence vector is the normalised masked mean of the token vectors the graph returns.
    weights = mask[:, :, None]
    mean = (tokens * weights).sum(1) / weights.sum(1)
    np.testing.assert_allclose(sentence, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-5)


def test_any_model_type_transformers_builds_is_exportable_and_others_are_refused():
    for model_type in ("bert", "mpnet", "deberta-v2", "modernbert", "gpt2"):
        assert check_architecture({"model_type": model_type}) == model_type
    unknown = r"cannot export model_type 'my-own-bert': transformers \S+ has no model"
    with pytest.raises(InputError, match=unknown):
        check_architecture({"model_type": "my-own-bert", "auto_map": {"AutoModel": "modeling.MyBert"}})
    with pytest.raises(InputError, match="cannot export model_type 't5': an encoder-decoder"):
        check_architecture({"model_type": "t5", "is_encoder_decoder": True})
    with pytest.raises(InputError, match="cannot export: config.json has no model_type"):
        check_architecture({})
