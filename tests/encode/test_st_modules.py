"""sentence-transformers' module pipeline (Pooling in every mode, Dense, Normalize) in torch and ONNX.

The reference is `SentenceTransformer` itself, loading the same folder: each pipeline is built and
saved by sentence-transformers, then embedded by embedkit's torch encoder and by the exported
graph, and the vectors must be the library's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")

from embedkit.encode.model_folder import read_model_spec  # noqa: E402
from embedkit.encode.torch_backend import TorchEncoder  # noqa: E402
from embedkit.errors import InputError  # noqa: E402

TEXTS = [
    "the wing flow",
    "boundary layer heat transfer at high mach number",
    "a",
    "the patient eats food and the dog runs on the beach with a man playing guitar",
]


def st_model(
    base: Path,
    folder: Path,
    pooling: str | list[str],
    dense: list[tuple[int, object]] = (),
    normalize: bool = True,
) -> Path:
    """Build and save a sentence-transformers model over the tiny BERT `base`."""
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(1)
    transformer = models.Transformer(str(base))
    modules = [transformer, models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    size = modules[1].get_embedding_dimension()
    for out, activation in dense:
        modules.append(models.Dense(in_features=size, out_features=out, activation_function=activation))
        size = out
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def library_vectors(folder: Path, normalize: bool = False) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=normalize)


@pytest.mark.parametrize(
    "pooling",
    ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ["cls", "mean"]],
)
def test_every_pooling_mode_with_a_dense_head_matches_sentence_transformers(tmp_path, tiny_bert, pooling):
    folder = st_model(tiny_bert, tmp_path / "m", pooling, dense=[(8, torch.nn.Tanh())])
    spec = read_model_spec(folder)
    assert spec.dim == 8 and spec.normalize
    ours = TorchEncoder(folder, device="cpu").encode(TEXTS, batch_size=2)
    assert ours.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(ours, library_vectors(folder), atol=2e-6, rtol=1e-5)


def test_two_dense_layers_without_normalize(tmp_path, tiny_bert):
    folder = st_model(
        tiny_bert,
        tmp_path / "m",
        "mean",
        dense=[(16, torch.nn.ReLU()), (6, torch.nn.Identity())],
        normalize=False,
    )
    encoder = TorchEncoder(folder, device="cpu")
    assert encoder.dim == 6 and not read_model_spec(folder).normalize
    ours = encoder.encode(TEXTS, batch_size=3, normalize=False)
    np.testing.assert_allclose(ours, library_vectors(folder), atol=2e-6, rtol=1e-5)


def test_both_pooling_config_formats_are_read(tmp_path, tiny_bert):
    folder = st_model(tiny_bert, tmp_path / "m", "max", normalize=False)
    config_path = folder / "1_Pooling" / "config.json"
    assert json.loads(config_path.read_text())["pooling_mode"] == "max"  # sentence-transformers 5+
    assert read_model_spec(folder).pooling == "max"
    # The boolean keys of sentence-transformers 2-4, as older model folders carry them.
    legacy = {
        "word_embedding_dimension": 32,
        "pooling_mode_cls_token": True,
        "pooling_mode_mean_tokens": True,
    }
    config_path.write_text(json.dumps(legacy))
    assert read_model_spec(folder).pooling == "cls+mean" and read_model_spec(folder).dim == 64


def test_an_unknown_module_is_refused_naming_it(tmp_path, tiny_bert):
    folder = st_model(tiny_bert, tmp_path / "m", "mean")
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(
        2, {"idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}
    )
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(InputError, match="'sentence_transformers.models.LayerNorm' is not supported"):
        read_model_spec(folder)

    from typer.testing import CliRunner

    from embedkit.cli.app import app

    corpus = tmp_path / "c.txt"
    corpus.write_text("a b\n")
    result = CliRunner().invoke(
        app, ["embed", str(corpus), "--model", str(folder), "--out", str(tmp_path / "o.npy")]
    )
    assert result.exit_code == 2 and "LayerNorm" in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


def test_a_pickled_dense_is_refused(tmp_path, tiny_bert):
    folder = st_model(tiny_bert, tmp_path / "m", "mean", dense=[(8, torch.nn.Tanh())])
    dense = next(folder.glob("2_Dense"))
    (dense / "model.safetensors").rename(dense / "pytorch_model.bin")
    with pytest.raises(InputError, match="pytorch_model.bin, a pickle"):
        read_model_spec(folder)


def test_a_dense_whose_input_does_not_fit_is_refused(tmp_path, tiny_bert):
    folder = st_model(tiny_bert, tmp_path / "m", "mean", dense=[(8, torch.nn.Tanh())])
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": ["cls", "mean"]}))
    with pytest.raises(InputError, match="takes 32-d vectors, but the modules before it give 64-d"):
        read_model_spec(folder)


def test_training_refuses_a_base_with_a_dense_head(tmp_path, tiny_bert):
    from embedkit.training.model import resolve_pooling

    folder = st_model(tiny_bert, tmp_path / "m", "mean", dense=[(8, torch.nn.Tanh())])
    with pytest.raises(InputError, match="has a Dense module"):
        resolve_pooling("auto", folder)


def test_export_puts_the_dense_head_in_the_graph_and_checks_against_sentence_transformers(
    tmp_path, tiny_bert
):
    pytest.importorskip("onnxruntime")
    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.export import export_model

    folder = st_model(tiny_bert, tmp_path / "m", "weightedmean", dense=[(8, torch.nn.Tanh())])
    result = export_model(folder, tmp_path / "onnx", fp16=False, int8=False, progress=False)
    meta = json.loads((result.out_dir / "embedkit.json").read_text())
    assert meta["dim"] == 8 and meta["pooling"] == "weightedmean"
    assert meta["parity"]["reference"].startswith("sentence-transformers ")
    ours = OnnxEncoder(result.out_dir, device="cpu").encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(ours, library_vectors(folder), atol=1e-5)


def test_the_parity_gate_catches_a_mistake_the_torch_path_shares(tmp_path, tiny_bert, monkeypatch):
    pytest.importorskip("onnxruntime")
    from embedkit.encode import torch_head
    from embedkit.export import ParityFailure, export_model

    folder = st_model(tiny_bert, tmp_path / "m", "mean", dense=[(8, torch.nn.Tanh())])
    # The Dense's activation forgotten in embedkit's torch code, so in the graph and in TorchEncoder
    # alike: only a reference outside embedkit can see it.
    monkeypatch.setattr(torch_head.Dense, "forward", lambda self, x: self.linear(x))
    with pytest.raises(ParityFailure, match="parity gate failed"):
        export_model(folder, tmp_path / "onnx", fp16=False, int8=False, progress=False)
    assert not (tmp_path / "onnx").exists()
