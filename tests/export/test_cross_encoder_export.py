"""`embedkit export` of a cross-encoder: the ONNX folder scores as `CrossEncoder.predict` scores the
torch folder, without torch; the logit gate refuses a graph that differs; other outputs refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from embedkit.cli.app import app  # noqa: E402
from embedkit.encode.cross_encoder import CrossEncoderModel  # noqa: E402

QUERY = "shock wave drag on the wing"
TEXTS = ["shock wave at high mach number", "the cat eats food", "pressure and drag " * 10, "a man"]


@pytest.fixture(scope="module")
def exported(tiny_cross_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ce-onnx") / "onnx"
    result = CliRunner().invoke(app, ["export", str(tiny_cross_encoder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "parity with PyTorch: logits differ by at most" in result.output
    return out


def test_the_export_scores_as_cross_encoder_predict(exported, tiny_cross_encoder):
    expected = st.CrossEncoder(str(tiny_cross_encoder), device="cpu").predict([(QUERY, t) for t in TEXTS])
    model = CrossEncoderModel(exported, device="cpu")
    assert model.backend == "onnx"
    np.testing.assert_allclose(model.score(QUERY, TEXTS), expected, atol=1e-5)
    meta = json.loads((exported / "embedkit.json").read_text())
    assert meta["kind"] == "cross-encoder" and meta["parity"]["max_logit_difference"] <= 1e-4


def test_the_export_reranks_a_search(exported, tiny_cross_encoder, tiny_bert, tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    runner = CliRunner()
    index = tmp_path / "idx"
    assert (
        runner.invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)]).exit_code
        == 0
    )
    ids = {}
    for model in (tiny_cross_encoder, exported):
        args = [
            "search",
            str(index),
            QUERY,
            "--json",
            "--mode",
            "dense",
            "--rerank",
            str(model),
            "--device",
            "cpu",
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        ids[model] = [h["id"] for h in json.loads(result.stdout)["hits"]]
    assert ids[exported] == ids[tiny_cross_encoder]


def test_a_graph_that_differs_fails_the_gate_and_writes_nothing(tiny_cross_encoder, tmp_path, monkeypatch):
    from embedkit.export import cross_encoder

    monkeypatch.setattr(cross_encoder, "MAX_LOGIT_DIFFERENCE", -1.0)  # no graph can pass
    result = CliRunner().invoke(app, ["export", str(tiny_cross_encoder), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    assert "nothing was written" in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("architecture", ["mpnet", "roberta", "deberta-v2"])
def test_other_architectures_export_and_score_as_cross_encoder_predict(architecture, tmp_path):
    from tiny_models import make_tiny_cross_encoder

    from embedkit.export.cross_encoder import export_cross_encoder

    plain = make_tiny_cross_encoder(tmp_path / "hf", architecture, seed=2)
    st.CrossEncoder(str(plain), device="cpu").save(str(tmp_path / "st"))
    export_cross_encoder(tmp_path / "st", tmp_path / "onnx")
    expected = st.CrossEncoder(str(tmp_path / "st"), device="cpu").predict([(QUERY, t) for t in TEXTS])
    np.testing.assert_allclose(CrossEncoderModel(tmp_path / "onnx").score(QUERY, TEXTS), expected, atol=1e-5)


def test_precisions_other_than_fp32_are_refused(tiny_cross_encoder, tmp_path):
    result = CliRunner().invoke(
        app, ["export", str(tiny_cross_encoder), "--out", str(tmp_path / "o"), "--int8"]
    )
    assert result.exit_code == 2
    assert "is a cross-encoder: it exports at fp32" in result.output
