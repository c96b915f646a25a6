"""Matryoshka's rotation: principal axes against numpy's SVD and a hand case, and whole runs whose
saved Dense module sentence-transformers and the ONNX export run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from training_runs import CORPUS, Killed, config, kill_after

from embedkit.encode.model_folder import read_model_spec, weights_fingerprint
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.errors import InputError
from embedkit.training import checkpoint as ckpt
from embedkit.training.config import TrainConfig
from embedkit.training.rotation import Rotation, principal_axes
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")


def dense_weight(folder: Path) -> np.ndarray:
    return load_file(str(folder / "2_Dense" / "model.safetensors"))["linear.weight"].numpy()


# --- the axes ------------------------------------------------------------------------------------------


def test_axes_by_hand_largest_second_moment_first() -> None:
    # second moments: 2 along x, 18 along y, 8 along z
    vectors = np.array([[0, 3, 0], [0, -3, 0], [0, 0, 2], [0, 0, -2], [1, 0, 0], [-1, 0, 0]], dtype=float)
    np.testing.assert_allclose(principal_axes(vectors), [[0, 1, 0], [0, 0, 1], [1, 0, 0]], atol=1e-7)


def test_axes_are_numpys_right_singular_vectors_in_order() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(200, 12)) * np.linspace(3.0, 0.5, 12)  # distinct spreads
    vectors = vectors @ np.linalg.qr(rng.normal(size=(12, 12)))[0]  # along directions no axis has
    axes = principal_axes(vectors)
    _, _, right = np.linalg.svd(vectors)  # rows: singular vectors, largest singular value first
    np.testing.assert_allclose(np.abs(np.sum(axes * right, axis=1)), 1.0, atol=1e-5)
    np.testing.assert_allclose(axes @ axes.T, np.eye(12), atol=1e-5)  # a rotation
    rows = np.arange(12)
    assert (axes[rows, np.abs(axes).argmax(axis=1)] > 0).all()  # the sign rule: one answer
    np.testing.assert_array_equal(principal_axes(-vectors), axes)


def test_axes_refuse_what_is_not_vectors() -> None:
    with pytest.raises(InputError, match="finite"):
        principal_axes(np.array([[1.0, np.nan]]))
    with pytest.raises(InputError, match="shape"):
        principal_axes(np.zeros(3))


def test_the_rotation_keeps_cosines_and_starts_as_the_identity() -> None:
    rotation = Rotation(6)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rotation(x), x)
    rotation.weight.copy_(torch.from_numpy(principal_axes(np.random.default_rng(1).normal(size=(9, 6)))))
    torch.testing.assert_close(rotation(x) @ rotation(x).T, x @ x.T, atol=1e-5, rtol=1e-5)


def test_the_setting_is_checked() -> None:
    assert TrainConfig(matryoshka_dims=(384, 128)).rotates
    assert not TrainConfig(matryoshka_dims=(384, 128), matryoshka_rotation_docs=0).rotates
    assert not TrainConfig().rotates  # no Matryoshka, no rotation
    for bad in (-1, True, 2.5):
        with pytest.raises(InputError, match="matryoshka_rotation_docs must be a whole number"):
            TrainConfig(matryoshka_rotation_docs=bad).validate()


# --- whole runs on a tiny model (32 dimensions) ---------------------------------------------------------


def mrl_config(base: Path, **changes: object) -> TrainConfig:
    return config(base, **{"matryoshka_dims": (32, 16, 8), **changes})


def test_a_run_saves_the_principal_axes_of_its_documents_as_a_dense_module(
    tmp_path: Path, tiny_bert: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    train(CORPUS, out, mrl_config(tiny_bert), progress=False)
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Dense", "Normalize"]
    assert json.loads((out / "2_Dense" / "config.json").read_text()) == {
        "in_features": 32,
        "out_features": 32,
        "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    # The axes of the base model's vectors of the corpus (all 12 documents: fewer than the sample),
    # from numpy's SVD; the 12 of 32 axes the documents span, up to sign.
    base = TorchEncoder(tiny_bert, device="cpu").encode(CORPUS, batch_size=4, normalize=True)
    _, spread, right = np.linalg.svd(np.asarray(base, dtype=np.float64))
    weight = dense_weight(out)
    np.testing.assert_allclose(weight @ weight.T, np.eye(32), atol=1e-5)
    distinct = int(np.sum(spread[:-1] / spread[1:] > 1.05))  # axes whose order is well defined
    assert distinct >= 3
    np.testing.assert_allclose(np.abs(np.sum(weight[:distinct] * right[:distinct], axis=1)), 1.0, atol=1e-3)
    # sentence-transformers runs the folder as embedkit does; the fingerprint covers the Dense weights
    ours = TorchEncoder(out, device="cpu").encode(CORPUS, batch_size=4, normalize=True)
    reference = SentenceTransformer(str(out), device="cpu").encode(CORPUS, convert_to_numpy=True)
    np.testing.assert_allclose(ours, reference, atol=2e-6)
    assert json.loads((out / "embedkit.json").read_text())["fingerprint"] == weights_fingerprint(out)
    assert read_model_spec(out).matryoshka_dims == (32, 16, 8)


def test_without_the_rotation_the_folder_has_no_dense_module(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "out"
    cfg = mrl_config(tiny_bert, matryoshka_rotation_docs=0, matryoshka_weights=(1.0, 1.0, 1.0))
    train(CORPUS, out, cfg, progress=False)
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Normalize"]
    assert not (out / "2_Dense").exists()


def test_the_export_runs_the_rotation(tmp_path: Path, tiny_bert: Path) -> None:
    pytest.importorskip("onnxruntime")
    from sentence_transformers import SentenceTransformer

    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.export import export_model

    out = tmp_path / "out"
    train(CORPUS, out, mrl_config(tiny_bert), progress=False)
    result = export_model(out, tmp_path / "onnx", progress=False)
    got = OnnxEncoder(result.out_dir, device="cpu").encode(CORPUS, batch_size=4)
    reference = SentenceTransformer(str(out), device="cpu").encode(CORPUS, convert_to_numpy=True)
    np.testing.assert_allclose(got, reference, atol=2e-5)


def test_resume_restores_the_rotation(tmp_path: Path, tiny_bert: Path) -> None:
    cfg = mrl_config(tiny_bert, method="micse", max_steps=5, save_steps=2, learning_rate=1e-3)
    train(CORPUS, tmp_path / "whole", cfg, progress=False)
    run = tmp_path / "run"
    with pytest.raises(Killed):
        train(CORPUS, run, cfg, progress=False, on_step=kill_after(3))
    train(CORPUS, run, cfg, progress=False, resume=True)
    np.testing.assert_array_equal(dense_weight(run), dense_weight(tmp_path / "whole"))


def test_a_matryoshka_checkpoint_of_an_earlier_embedkit_is_refused(tmp_path: Path) -> None:
    cfg = TrainConfig(matryoshka_dims=(384, 128))
    made_from = {"data_fingerprint": "d", "base_fingerprint": "b"}
    current = {**made_from, "matryoshka_head_reads": ckpt.MATRYOSHKA_HEAD_READS}
    older = cfg.to_dict()
    del older["matryoshka_rotation_docs"]  # the first design's: no rotation
    for recorded in (older, cfg.to_dict()):  # the second's: the rotation, its head on rotated vectors
        (tmp_path / "state.json").write_text(json.dumps({"config": recorded, **made_from}))
        with pytest.raises(InputError, match="earlier embedkit's .* train again without --resume"):
            ckpt.check_train_resumable(tmp_path, cfg, current)
    (tmp_path / "state.json").write_text(json.dumps({"config": cfg.to_dict(), **current}))
    ckpt.check_train_resumable(tmp_path, cfg, current)
    plain = TrainConfig().to_dict()
    (tmp_path / "state.json").write_text(json.dumps({"config": plain, **made_from}))
    ckpt.check_train_resumable(tmp_path, TrainConfig(), made_from)  # no Matryoshka: nothing to refuse
