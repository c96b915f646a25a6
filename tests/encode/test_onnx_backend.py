"""OnnxEncoder: the runtime over an exported folder (DistilBERT: no token_type_ids, raw vectors)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnxruntime = pytest.importorskip("onnxruntime")

from embedkit.encode.onnx_backend import OnnxEncoder  # noqa: E402
from embedkit.errors import InputError  # noqa: E402
from embedkit.export import ParityGates, export_model  # noqa: E402

# Pairs of different lengths in different combinations: no two pairs tie on cosine, so the
# Spearman cannot hinge on float noise.
STS_ROWS = [
    ("cat", "a cat eats", 4.5),
    ("a man", "a man plays guitar on the beach", 3.8),
    ("shock wave and boundary layer", "legal contract", 0.2),
    ("heat transfer at mach number five", "heat transfer at high speed", 3.1),
    ("a girl plays soccer", "the boy plays", 2.9),
    ("the engine load is large now", "patient disease", 0.1),
    ("one two three", "three two one four five", 3.5),
    ("drag and lift of a small body", "lift and drag of a body today", 4.2),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, tiny_bert_no_types: Path):
    work = tmp_path_factory.mktemp("onnx-encoder")
    calibration = work / "calibration.txt"
    calibration.write_text("a calibration sentence\nanother one, with 42 numbers\n", encoding="utf-8")
    sts = work / "dev.tsv"
    sts.write_text(
        "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in STS_ROWS),
        encoding="utf-8",
    )
    result = export_model(
        tiny_bert_no_types,
        work / "distilbert-onnx",
        int8=True,
        normalize=False,
        calibration=calibration,
        dev_sts=sts,
        progress=False,
        # Eight pairs on a random model: a swapped rank moves Spearman by points. The drop gate
        # itself is tested on plain numbers in test_export_parity.py.
        gates=ParityGates(int8_max_sts_drop=100.0),
    )
    return result


@pytest.fixture(scope="module")
def torch_encoder(tiny_bert_no_types: Path):
    from embedkit.encode.torch_backend import TorchEncoder

    return TorchEncoder(tiny_bert_no_types, device="cpu")


def test_metadata_of_an_unnormalised_export(exported):
    meta = exported.metadata
    assert meta["input_names"] == ["input_ids", "attention_mask"]
    assert (meta["pooling"], meta["normalize"], meta["source_normalize"]) == ("cls", False, False)
    assert meta["parity"]["calibration_sentences"] == 2
    assert meta["parity"]["sentences"] == meta["parity"]["builtin_sentences"] + 2


def test_sts_spearman_matches_scipy(exported, torch_encoder):
    from scipy.stats import spearmanr

    first = torch_encoder.encode([r[0] for r in STS_ROWS], normalize=True)
    second = torch_encoder.encode([r[1] for r in STS_ROWS], normalize=True)
    expected = 100 * spearmanr(np.sum(first * second, axis=1), [r[2] for r in STS_ROWS]).statistic
    parity = exported.metadata["parity"]
    assert parity["torch_sts_spearman"] == pytest.approx(expected, abs=1e-6)
    assert parity["fp32"]["sts_spearman"] == pytest.approx(expected, abs=1e-3)
    assert parity["int8"]["sts_spearman"] is not None


def test_encode_matches_torch_raw_and_normalised(exported, torch_encoder, sentences: list[str]):
    encoder = OnnxEncoder(exported.out_dir, device="cpu")
    assert (encoder.backend, encoder.precision, encoder.device, encoder.dim) == ("onnx", "fp32", "cpu", 32)
    assert encoder.input_names == {"input_ids", "attention_mask"}  # token_type_ids are never fed
    raw = encoder.encode(sentences)
    np.testing.assert_allclose(raw, torch_encoder.encode(sentences, normalize=False), atol=1e-5)
    unit = encoder.encode(sentences, normalize=True)
    np.testing.assert_allclose(unit, torch_encoder.encode(sentences, normalize=True), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)


def test_shapes_order_and_truncation(exported, sentences: list[str]):
    encoder = OnnxEncoder(exported.out_dir, device="cpu", intra_op_threads=1)
    one = encoder.encode(sentences[3])
    assert one.shape == (32,) and one.dtype == np.float32
    np.testing.assert_allclose(encoder.encode(sentences, batch_size=2)[3], one, atol=1e-6)
    np.testing.assert_allclose(encoder.encode(sentences, batch_size=5), encoder.encode(sentences), atol=1e-6)
    assert encoder.encode([]).shape == (0, 32)
    assert encoder.truncated == 0
    encoder.encode(["word " * 200])
    assert encoder.truncated == 1


def test_int8_is_never_the_default_but_can_be_asked_for(exported, sentences: list[str]):
    default = OnnxEncoder(exported.out_dir, device="auto")
    assert default.precision == "fp32"
    int8 = OnnxEncoder(exported.out_dir, device="cpu", precision="int8")
    cos = np.sum(
        (a := default.encode(sentences, normalize=True)) * int8.encode(sentences, normalize=True), axis=1
    ) / np.linalg.norm(a, axis=1)
    assert int8.precision == "int8" and cos.min() > 0.95


def test_fingerprint_is_the_source_models(exported, tiny_bert_no_types: Path):
    from embedkit.encode.identity import model_fingerprint

    assert OnnxEncoder(exported.out_dir, device="cpu").fingerprint == model_fingerprint(tiny_bert_no_types)


def test_bad_arguments(exported, tmp_path: Path):
    with pytest.raises(InputError, match=r"has no fp16 model \(has fp32, int8\): export it with --fp16"):
        OnnxEncoder(exported.out_dir, precision="fp16")
    with pytest.raises(InputError, match="unknown precision 'bf16'"):
        OnnxEncoder(exported.out_dir, precision="bf16")
    with pytest.raises(InputError, match="unknown device 'tpu'"):
        OnnxEncoder(exported.out_dir, device="tpu")
    with pytest.raises(InputError, match="threads must be 0 \\(all cores\\) or more, got -1"):
        OnnxEncoder(exported.out_dir, intra_op_threads=-1)
    with pytest.raises(InputError, match="not an ONNX export"):
        OnnxEncoder(tmp_path)
    with pytest.raises(InputError, match="unknown device 'cuda:x'"):
        OnnxEncoder(exported.out_dir, device="cuda:x")
    tampered = tmp_path / "tampered"
    shutil.copytree(exported.out_dir, tampered)
    meta = json.loads((tampered / "embedkit.json").read_text())
    meta["files"]["fp32"] = "../model.onnx"
    (tampered / "embedkit.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="is not a file name inside the export folder"):
        OnnxEncoder(tampered)
    (tampered / "model.onnx").write_bytes(b"not an onnx graph")
    (tampered / "embedkit.json").write_text(json.dumps(exported.metadata))
    with pytest.raises(InputError, match="cannot load .*model.onnx"):
        OnnxEncoder(tampered, device="cpu")
    normalised = OnnxEncoder(exported.out_dir, device="cpu")
    normalised.normalize_default = True  # as for a graph that normalises inside
    with pytest.raises(InputError, match="L2-normalises inside the graph"):
        normalised.encode(["x"], normalize=False)


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider'")
def test_cuda_request_never_runs_silently_on_cpu(exported, monkeypatch: pytest.MonkeyPatch):
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(InputError, match="CUDA was requested but ONNX Runtime cannot use it"):
            OnnxEncoder(exported.out_dir, device="cuda")
    # onnxruntime-gpu without working CUDA libraries lists the provider, then creates a CPU-only
    # session without a word. Simulated here on any machine, a GPU one included.
    real_session = onnxruntime.InferenceSession
    preloads: list[bool] = []

    def falling_back(path, sess_options=None, providers=None):
        return real_session(path, sess_options=sess_options, providers=["CPUExecutionProvider"])

    monkeypatch.setattr(
        onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.setattr(onnxruntime, "InferenceSession", falling_back)
    monkeypatch.setattr(onnxruntime, "preload_dlls", lambda: preloads.append(True), raising=False)
    with pytest.raises(InputError, match="the session fell back to CPU"):
        OnnxEncoder(exported.out_dir, device="cuda")
    assert preloads, "the pip packages' CUDA libraries were not preloaded before asking for CUDA"
    with pytest.warns(RuntimeWarning, match="could not load CUDA"):
        auto = OnnxEncoder(exported.out_dir, device="auto")
    assert auto.device == "cpu" and auto.precision == "fp32"


@pytest.mark.skipif(
    "CUDAExecutionProvider" not in onnxruntime.get_available_providers(), reason="needs onnxruntime-gpu"
)
def test_cuda_session_matches_cpu(tmp_path: Path, tiny_bert: Path):
    """On a GPU: the CUDA provider really runs, fp16 is its default, both agree with the CPU graph."""
    out = export_model(tiny_bert, tmp_path / "onnx", fp16=True, progress=False).out_dir
    texts = ["a short one", "a much longer sentence with numbers 1 2 3 and punctuation!", "x"] * 5
    reference = OnnxEncoder(out, device="cpu").encode(texts)
    on_gpu = OnnxEncoder(out, device="cuda", precision="fp32")
    default = OnnxEncoder(out, device="auto")
    assert on_gpu.device == "cuda" and on_gpu.session.get_providers()[0] == "CUDAExecutionProvider"
    assert default.device == "cuda" and default.precision == "fp16"
    assert np.min(np.sum(on_gpu.encode(texts) * reference, axis=1)) >= 0.99999
    assert np.min(np.sum(default.encode(texts) * reference, axis=1)) >= 0.999


def test_load_encoder_dispatches_to_onnx(exported):
    from embedkit.encode.loading import load_encoder

    encoder = load_encoder(exported.out_dir, device="cpu", precision="int8")
    assert isinstance(encoder, OnnxEncoder) and encoder.precision == "int8"


def test_runtime_path_never_imports_torch(exported):
    code = (
        "import sys\n"
        "from embedkit.encode.onnx_backend import OnnxEncoder\n"
        f"vectors = OnnxEncoder({str(exported.out_dir)!r}, device='cpu').encode(['hello there', 'x'])\n"
        "assert vectors.shape == (2, 32), vectors.shape\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_spinning_is_a_session_option_of_the_encoder(exported, sentences: list[str]):
    def allows_spinning(encoder: OnnxEncoder) -> str:
        options = encoder.session.get_session_options()
        try:
            return options.get_session_config_entry("session.intra_op.allow_spinning")
        except Exception:  # unset: ONNX Runtime's default, spinning
            return "1"

    default, quiet = (OnnxEncoder(exported.out_dir, device="cpu", spinning=s) for s in (True, False))
    assert (allows_spinning(default), allows_spinning(quiet)) == ("1", "0")
    np.testing.assert_array_equal(default.encode(sentences[:4]), quiet.encode(sentences[:4]))
