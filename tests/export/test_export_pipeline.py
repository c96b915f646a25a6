"""`export_model`: verified output, metadata that says what the graph does, all-or-nothing writes."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from embedkit.encode.identity import model_fingerprint  # noqa: E402
from embedkit.encode.model_folder import read_model_spec  # noqa: E402
from embedkit.encode.onnx_backend import OnnxEncoder  # noqa: E402
from embedkit.errors import InputError, RunFailure  # noqa: E402
from embedkit.export import ParityFailure, ParityGates, export_model  # noqa: E402


def leftovers(folder: Path) -> list[str]:
    """Temporary folders that atomic writes would leave behind on a bug."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and ".tmp" in p.name)


@pytest.fixture(scope="module")
def export_all(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path):
    out = tmp_path_factory.mktemp("exports") / "tiny-bert-onnx"
    steps: list[str] = []
    result = export_model(tiny_bert, out, fp16=True, int8=True, progress=False, on_step=steps.append)
    return result, steps


def test_writes_every_precision_and_the_tokenizer(export_all, tiny_bert: Path):
    result, _ = export_all
    names = {p.name for p in result.out_dir.iterdir()}
    assert {"model.onnx", "model_fp16.onnx", "model_int8.onnx", "config.json", "embedkit.json"} <= names
    assert {"tokenizer.json", "tokenizer_config.json", "vocab.txt"} <= names
    assert result.files == {"fp32": "model.onnx", "fp16": "model_fp16.onnx", "int8": "model_int8.onnx"}
    assert not leftovers(result.out_dir.parent)
    assert [r.precision for r in result.reports] == ["fp32", "fp16", "int8"]
    assert all(r.passed for r in result.reports)


def test_metadata_round_trips_and_names_what_the_graph_does(export_all, tiny_bert: Path):
    import onnx
    import onnxruntime

    result, _ = export_all
    meta = json.loads((result.out_dir / "embedkit.json").read_text(encoding="utf-8"))
    assert meta == json.loads(json.dumps(result.metadata))
    assert meta["fingerprint"] == model_fingerprint(tiny_bert)
    assert model_fingerprint(result.out_dir) == model_fingerprint(tiny_bert)
    spec = read_model_spec(result.out_dir)
    assert (spec.kind, spec.pooling, spec.normalize, spec.dim, spec.max_seq_length, spec.model_type) == (
        "onnx",
        "mean",
        True,
        32,
        64,
        "bert",
    )
    assert meta["precisions"] == ["fp32", "fp16", "int8"]
    for precision, file in meta["files"].items():
        session = onnxruntime.InferenceSession(str(result.out_dir / file), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == meta["input_names"], precision
        assert [o.name for o in session.get_outputs()] == meta["output_names"] == ["sentence_embedding"]
    graph = onnx.load(str(result.out_dir / "model.onnx"))
    assert {op.version for op in graph.opset_import if op.domain in ("", "ai.onnx")} == {meta["opset"]}
    ops = Counter(node.op_type for node in graph.graph.node)
    assert meta["fusion"] == {op: ops[op] for op in meta["fusion"]}
    assert meta["fusion"]["Attention"] == 4
    for precision in ("fp32", "fp16", "int8"):
        figures = meta["parity"][precision]
        assert figures["passed"] is True and figures["sentences"] == meta["parity"]["sentences"] == 300
    assert meta["int8"]["per_channel"] is True and meta["fp16"]["plan"] == "pooling-fp32"
    assert meta["int8"]["quantized_graph"] == "fused" and "QAttention" in {
        node.op_type for node in onnx.load(str(result.out_dir / "model_int8.onnx")).graph.node
    }


def test_each_precision_matches_torch(export_all, tiny_bert: Path, sentences: list[str]):
    from embedkit.encode.torch_backend import TorchEncoder

    result, _ = export_all
    expected = TorchEncoder(tiny_bert, device="cpu").encode(sentences, normalize=True)
    for precision, floor in (("fp32", 0.99999), ("fp16", 0.999), ("int8", 0.95)):
        got = OnnxEncoder(result.out_dir, device="cpu", precision=precision).encode(sentences)
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)  # normalised in the graph
        assert np.min(np.sum(got * expected, axis=1)) >= floor, precision


def test_failed_gate_keeps_the_previous_export_intact(export_all, tmp_path: Path, tiny_bert: Path):
    result, _ = export_all
    target = tmp_path / "existing"
    shutil.copytree(result.out_dir, target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(
        ParityFailure, match=r"parity gate failed: fp32: min cosine .*\(gate: min >= 1\.5\)"
    ) as info:
        export_model(tiny_bert, target, progress=False, gates=ParityGates(fp32_min_cosine=1.5))
    assert isinstance(info.value, RunFailure)
    assert [r.precision for r in info.value.reports] == ["fp32"] and not info.value.reports[0].passed
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert not leftovers(tmp_path)


def test_broken_graph_fails_and_writes_nothing(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    import embedkit.export.onnx_graph as onnx_graph

    real_export = onnx_graph.export_graph

    def wrong_pooling(*args, **kwargs):
        kwargs["modules"] = kwargs["modules"].with_pooling("cls")  # the model pools by mean: wrong graph
        return real_export(*args, **kwargs)

    monkeypatch.setattr(onnx_graph, "export_graph", wrong_pooling)
    out = tmp_path / "never"
    with pytest.raises(ParityFailure, match="parity gate failed: fp32"):
        export_model(tiny_bert, out, int8=True, progress=False)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_int8_tries_every_plan_before_failing(tmp_path: Path, tiny_bert: Path):
    steps: list[str] = []
    out = tmp_path / "int8"
    with pytest.raises(ParityFailure, match="parity gate failed: int8") as info:
        export_model(
            tiny_bert,
            out,
            int8=True,
            progress=False,
            gates=ParityGates(int8_min_cosine=1.5),
            on_step=steps.append,
        )
    plans = [s for s in steps if s.startswith("quantizing to int8")]
    assert len(plans) == 4 and "embeddings-ffn-fp32" in plans[-1]
    assert [r.precision for r in info.value.reports] == ["fp32", "int8"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_no_optimize_exports_the_plain_graph(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    import onnx

    # onnxruntime's symbolic shape inference gives up on the traced graph and saves debug files
    # into the working folder; the export must keep them out of the user's folder.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = export_model(tiny_bert, tmp_path / "plain", optimize=False, int8=True, progress=False)
    assert list(cwd.iterdir()) == []
    assert result.metadata["optimized"] is False and result.metadata["fusion"] == {}
    assert result.metadata["int8"]["quantized_graph"] == "traced"
    ops = {node.op_type for node in onnx.load(str(result.out_dir / "model.onnx")).graph.node}
    assert "Attention" not in ops and "Softmax" in ops
    assert result.reports[0].min_cosine >= 0.99999


def test_int8_falls_back_to_the_traced_graph(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    """Where this onnxruntime cannot pre-process the fused graph, the traced one is quantized."""
    import embedkit.export.precision as precision

    real_prepare = precision.prepare_for_quantization

    def fused_fails(src: Path, dst: Path) -> str:
        if src.name == "model.onnx":
            raise RunFailure("int8 pre-processing (shape inference) failed: simulated")
        return real_prepare(src, dst)

    monkeypatch.setattr(precision, "prepare_for_quantization", fused_fails)
    steps: list[str] = []
    result = export_model(tiny_bert, tmp_path / "fallback", int8=True, progress=False, on_step=steps.append)
    assert result.metadata["int8"]["quantized_graph"] == "traced"
    assert result.metadata["fusion"]["Attention"] == 4  # model.onnx itself stays fused
    assert any("fused graph cannot be quantized here" in s for s in steps)
    assert result.reports[-1].precision == "int8" and result.reports[-1].passed


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp, src: (tmp / "empty", tmp / "out"), "not a model folder"),
        (lambda tmp, src: (tmp / "missing", tmp / "out"), "model folder not found"),
        (lambda tmp, src: (src, src), "would replace the model folder itself"),
        (lambda tmp, src: (src, src.parent), "would replace the model folder itself"),
        (lambda tmp, src: (src, tmp / "file.txt"), "is a file, not a folder"),
        (lambda tmp, src: (src, tmp / "full"), "non-empty folder that is not an embedkit export"),
        (lambda tmp, src: (src, tmp / "file.txt" / "sub"), "is not writable"),
    ],
)
def test_input_errors(tmp_path: Path, tiny_bert: Path, make, message: str):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep me")
    source, out = make(tmp_path, tiny_bert)
    with pytest.raises(InputError, match=message):
        export_model(source, out, progress=False)
    assert (tmp_path / "full" / "notes.txt").read_text() == "keep me"


def test_option_errors(tmp_path: Path, tiny_bert: Path, export_all):
    out = tmp_path / "out"
    with pytest.raises(InputError, match="opset 13 is not supported: use 14 to 20"):
        export_model(tiny_bert, out, opset=13, progress=False)
    with pytest.raises(InputError, match="calibration file not found"):
        export_model(tiny_bert, out, calibration=tmp_path / "nope.txt", progress=False)
    with pytest.raises(InputError, match="--dev-sts file not found"):
        export_model(tiny_bert, out, dev_sts=tmp_path / "nope.tsv", progress=False)
    with pytest.raises(InputError, match="already an ONNX export"):
        export_model(export_all[0].out_dir, out, progress=False)
    assert not out.exists()


def test_unsupported_architecture(tmp_path: Path, tiny_bert: Path):
    source = tmp_path / "custom"
    shutil.copytree(tiny_bert, source)
    config = json.loads((source / "config.json").read_text())
    config["model_type"] = "my-own-bert"
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="cannot export model_type 'my-own-bert'"):
        export_model(source, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_minilm_exports_fully_fused_and_passes_every_gate(tmp_path: Path, minilm: Path):
    """The bundled all-MiniLM-L6-v2: the fusion counts and gates the docs quote."""
    result = export_model(minilm, tmp_path / "minilm-onnx", fp16=True, int8=True, progress=False)
    assert result.metadata["fusion"] == {
        "EmbedLayerNormalization": 1,
        "Attention": 6,
        "SkipLayerNormalization": 12,
        "BiasGelu": 6,
    }
    assert result.metadata["input_names"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert (result.metadata["dim"], result.metadata["max_seq_length"]) == (384, 256)
    assert all(r.passed for r in result.reports)
    int8 = result.metadata["parity"]["int8"]
    assert int8["mean_cosine"] >= 0.98 and int8["min_cosine"] >= 0.95


def test_a_second_writer_of_one_export_folder_fails_fast(tmp_path: Path, tiny_bert: Path):
    import subprocess
    import sys

    out = tmp_path / "onnx"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom embedkit.storage.locking import write_lock\n"
         "with write_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError, match="is being written by process"):
            export_model(tiny_bert, out, progress=False)
        assert not (out / "model.onnx").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_model_too_large_for_one_onnx_file_is_refused_before_any_work(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
):
    from safetensors import safe_open

    import embedkit.export.pipeline as pipeline

    with safe_open(str(tiny_bert / "model.safetensors"), "np") as tensors:
        count = sum(int(np.prod(tensors.get_slice(n).get_shape())) for n in tensors.keys())  # noqa: SIM118
    monkeypatch.setattr(pipeline, "MAX_GRAPH_BYTES", 4 * count - 1)  # one parameter too many
    with pytest.raises(InputError, match=r"parameters take .* GiB in fp32, more than one ONNX file holds"):
        export_model(tiny_bert, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(pipeline, "MAX_GRAPH_BYTES", 4 * count)  # exactly fits
    pipeline._check_graph_size(tiny_bert)
