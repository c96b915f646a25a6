"""The trained model folder: sentence-transformers loads it and embeds as a hand-written pipeline does."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from embedkit.encode.model_folder import read_model_spec
from embedkit.encode.torch_backend import load_backbone
from embedkit.training.save import write_model_folder

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_vectors(model_dir: Path, texts: list[str], pooling: str) -> np.ndarray:
    """Tokenize with the HF tokenizer, run AutoModel, pool by hand, L2-normalise with numpy."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).eval()
    out = []
    for text in texts:
        inputs = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**inputs).last_hidden_state[0].numpy()  # (T, D)
        vector = hidden[0] if pooling == "cls" else hidden.mean(axis=0)
        out.append(vector / np.linalg.norm(vector))
    return np.stack(out)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_folder_loads_in_sentence_transformers(
    tmp_path: Path, tiny_bert: Path, sentences: list[str], pooling: str
) -> None:
    from sentence_transformers import SentenceTransformer

    backbone = load_backbone(tiny_bert)
    out = tmp_path / "model"
    info = write_model_folder(out, backbone, tiny_bert, pooling, 48, {"method": "simcse"})

    st = SentenceTransformer(str(out), device="cpu")
    got = st.encode(sentences, convert_to_numpy=True)
    np.testing.assert_allclose(got, reference_vectors(out, sentences, pooling), atol=1e-5)
    assert st.max_seq_length == 48

    spec = read_model_spec(out)
    assert (spec.pooling, spec.normalize, spec.dim, spec.max_seq_length, spec.kind) == (
        pooling,
        True,
        32,
        48,
        "torch",
    )
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["Transformer", "Pooling", "Normalize"]
    assert info["method"] == "simcse"


def test_metadata_fingerprint_and_weights(tmp_path: Path, tiny_bert: Path) -> None:
    backbone = load_backbone(tiny_bert)
    out = tmp_path / "model"
    write_model_folder(out, backbone, tiny_bert, "mean", 64, {"method": "micse", "dev": None})
    meta = json.loads((out / "embedkit.json").read_text())
    digest = hashlib.sha256(b"model.safetensors" + (out / "model.safetensors").read_bytes()).hexdigest()[:16]
    assert meta["fingerprint"] == digest
    assert meta["method"] == "micse" and meta["normalize"] is True and meta["model_type"] == "bert"
    assert meta["embedkit_version"]
    # the backbone only: same tensors as the base, no MLP head
    from safetensors.torch import load_file

    saved = load_file(str(out / "model.safetensors"))
    base = load_file(str(tiny_bert / "model.safetensors"))
    assert not any("head" in k or "mlp" in k for k in saved)
    for name, tensor in base.items():
        torch.testing.assert_close(saved[name], tensor)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (tiny_bert / name).read_bytes()


def test_replaces_a_run_folder_as_a_whole(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "run"
    (out / "checkpoints" / "step-000002").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    backbone = load_backbone(tiny_bert)
    write_model_folder(
        out, backbone, tiny_bert, "mean", 64, {}, extra_files={"metrics.jsonl": out / "metrics.jsonl"}
    )
    assert not (out / "checkpoints").exists()
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert not [p for p in tmp_path.iterdir() if p.name != "run"]  # no temporary folder left


def test_a_failed_write_leaves_the_old_folder(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("old")

    class Broken(torch.nn.Module):
        config = load_backbone(tiny_bert).config

        def save_pretrained(self, path: str) -> None:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_model_folder(out, Broken(), tiny_bert, "mean", 64, {})
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
