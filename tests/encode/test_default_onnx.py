"""The bundled default model runs as its ONNX form, exported once into the user cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import embedkit.encode.default_onnx as default_onnx
import embedkit.storage.user_cache as user_cache
from embedkit.encode.loading import load_encoder
from embedkit.encode.torch_backend import TorchEncoder


@pytest.fixture
def bundled(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The tiny BERT stands in for the bundled model; the cache is a fresh folder; exports are counted."""
    pytest.importorskip("onnx")
    monkeypatch.setattr(default_onnx, "default_base_model_path", lambda: tiny_bert)
    monkeypatch.setenv(user_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(default_onnx.BACKEND_ENV, raising=False)
    exports: list[Path] = []
    original = default_onnx._export
    monkeypatch.setattr(default_onnx, "_export", lambda src, dst: exports.append(dst) or original(src, dst))
    return exports


def test_first_open_exports_once_and_matches_torch(bundled: list[Path], tiny_bert: Path, tmp_path: Path):
    texts = ["a wing in a wind tunnel", "shock waves at mach two", "heat transfer in a boundary layer"]
    encoder = load_encoder(tiny_bert, device="cpu")
    assert encoder.backend == "onnx" and len(bundled) == 1
    assert Path(encoder.path).is_relative_to(tmp_path / "cache" / "onnx")
    again = load_encoder(tiny_bert, device="cpu")
    assert len(bundled) == 1 and again.path == encoder.path  # cached
    reference = TorchEncoder(tiny_bert, device="cpu")
    assert encoder.fingerprint == reference.fingerprint  # indexes accept either form
    cosine = (encoder.encode(texts, normalize=True) * reference.encode(texts, normalize=True)).sum(1)
    assert np.all(cosine > 0.99999)
    # an index records where the model comes from, not the cache entry
    assert default_onnx.recorded_model_path(encoder) == tiny_bert.resolve()


def test_opt_out_and_other_models_keep_torch(
    bundled: list[Path], tiny_bert: Path, tiny_bert_no_types: Path, monkeypatch: pytest.MonkeyPatch
):
    assert load_encoder(tiny_bert_no_types, device="cpu").backend == "torch"  # not the bundled model
    monkeypatch.setenv(default_onnx.BACKEND_ENV, "torch")
    assert load_encoder(tiny_bert, device="cpu").backend == "torch"
    assert bundled == []


@pytest.mark.parametrize("spot", ["under a file", "a file", "a device"])
def test_an_unusable_cache_is_one_true_line_then_torch(
    bundled: list[Path], tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd, spot: str
):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    cache = {"under a file": blocker / "cache", "a file": blocker, "a device": Path("/dev/null/cache")}[spot]
    monkeypatch.setenv(user_cache.CACHE_ENV, str(cache))
    with pytest.warns(UserWarning) as caught:
        encoder = load_encoder(tiny_bert, device="cpu")
    assert encoder.backend == "torch" and bundled == []
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("the bundled model runs with torch: the cache folder cannot hold its ONNX form")
    assert user_cache.CACHE_ENV in message and "cpu` extra" not in message, message
    named = message.split("(", 1)[1].split(" is not a folder", 1)[0]  # the obstacle, a path that exists
    assert Path(named).exists() and not Path(named).is_dir(), message
    assert "cached in" not in capfd.readouterr().err  # no promise of a cache that cannot be


def test_a_second_first_run_waits_for_the_export_under_way(
    bundled: list[Path], tiny_bert: Path, tmp_path: Path, capfd
):
    """Another process holding the export's lock (a first run exporting) is waited for, never raced
    and never silently replaced by torch: the export here starts only once that lock is released."""
    import subprocess
    import sys
    import time

    folder = default_onnx.onnx_folder_for(tiny_bert)
    folder.parent.mkdir(parents=True)
    held, released = tmp_path / "held", tmp_path / "released"
    holder = (
        "import pathlib, sys, time\n"
        "from embedkit.storage.locking import write_lock\n"
        "with write_lock(sys.argv[1]):\n"
        "    pathlib.Path(sys.argv[2]).touch(); time.sleep(3); pathlib.Path(sys.argv[3]).touch()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder, str(folder), str(held), str(released)])
    while not held.exists():
        assert process.poll() is None, "the holder never took the lock"
        time.sleep(0.02)
    seen: list[bool] = []
    export = default_onnx._export
    default_onnx._export = lambda src, dst: seen.append(released.exists()) or export(src, dst)
    try:
        encoder = load_encoder(tiny_bert, device="cpu")
    finally:
        default_onnx._export = export
        process.wait(timeout=60)
    assert encoder.backend == "onnx" and seen == [True], seen
    assert "another process exports the bundled model" in capfd.readouterr().err


def test_the_cache_is_keyed_by_the_model_not_where_it_is_installed(
    bundled: list[Path], tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two virtual environments install the same model at two paths: one export serves both."""
    installs = [tmp_path / "venv-a" / "model", tmp_path / "venv-b" / "site-packages" / "model"]
    for install in installs:
        shutil.copytree(tiny_bert, install, copy_function=shutil.copyfile)  # new mtimes, new inodes
    opened = []
    for install in installs:
        monkeypatch.setattr(default_onnx, "default_base_model_path", lambda install=install: install)
        opened.append(load_encoder(install, device="cpu"))
    assert len(bundled) == 1 and opened[0].path == opened[1].path
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 1


@pytest.mark.parametrize("change", ["weights", "config", "tokenizer"])
def test_a_model_with_other_content_gets_its_own_cache_entry(tiny_bert: Path, tmp_path: Path, change: str):
    from safetensors.numpy import load_file, save_file

    changed = tmp_path / "model"
    shutil.copytree(tiny_bert, changed)
    if change == "weights":
        tensors = load_file(changed / "model.safetensors")
        name = next(n for n in sorted(tensors) if n.endswith("weight") and tensors[n].ndim == 2)
        tensors[name] = tensors[name] + np.float32(1e-3)
        save_file(tensors, changed / "model.safetensors")
    elif change == "config":
        config = json.loads((changed / "config.json").read_text())
        config["layer_norm_eps"] = config.get("layer_norm_eps", 1e-12) * 10
        (changed / "config.json").write_text(json.dumps(config))
    else:
        vocab = changed / "vocab.txt"
        vocab.write_text(vocab.read_text() + "newword\n")
    assert default_onnx.onnx_folder_for(changed) != default_onnx.onnx_folder_for(tiny_bert)
