"""`embedkit eval sts` and `embedkit eval retrieval`: outputs, files written, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from eval_data import QRELS, write_beir, write_sts
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.evaluation.metrics import RETRIEVAL_METRICS
from embedkit.jobs.index_options import IndexOptions

runner = CliRunner()


def test_sts_prints_a_table_and_writes_json(tiny_bert: Path, tmp_path: Path) -> None:
    import scipy.stats

    from embedkit.encode.torch_backend import TorchEncoder

    path = write_sts(tmp_path / "tiny.tsv")
    out = tmp_path / "results" / "sts.json"
    result = runner.invoke(app, ["eval", "sts", str(path), "--model", str(tiny_bert), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "spearman_cosine" in result.output and "tiny" in result.output
    written = json.loads(out.read_text())
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
    encoder = TorchEncoder(tiny_bert, device="cpu")
    a = encoder.encode([r[0] for r in rows], normalize=True)
    b = encoder.encode([r[1] for r in rows], normalize=True)
    expected = 100 * scipy.stats.spearmanr((a * b).sum(1), [float(r[2]) for r in rows]).statistic
    assert written["task"] == "sts"
    assert written["metrics"]["spearman_cosine"] == pytest.approx(expected, abs=1e-4)
    assert written["files"][0]["pairs"] == 12
    assert written["fingerprint"] == encoder.fingerprint


def test_sts_with_constant_predictions_is_undefined_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    import embedkit.cli.evaluate as evaluate

    class Constant:
        path, fingerprint, backend, device = Path("constant"), "x", "test", "cpu"

        def encode(self, texts, batch_size=64, normalize=None, progress=False):
            return np.ones((len(texts), 4), np.float32) / 2  # every cosine is 1: no ranking

    monkeypatch.setattr(evaluate, "load_model", lambda *args: Constant())
    first, second = write_sts(tmp_path / "a.tsv"), write_sts(tmp_path / "b.tsv")
    out = tmp_path / "sts.json"
    result = runner.invoke(app, ["eval", "sts", str(first), str(second), "--json", str(out)])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: Spearman is undefined for a, b: the model gives every pair the same cosine similarity "
        "(a collapsed or broken model); no mean and no JSON written\n"
    )
    assert "nan" not in result.stdout and "undefined" in result.stdout
    assert not out.exists()


def test_retrieval_writes_metrics_and_per_query(tiny_bert: Path, tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "beir")
    per_query, out = tmp_path / "per-query.jsonl", tmp_path / "retrieval.json"
    args = [
        "eval",
        "retrieval",
        str(folder),
        "-m",
        str(tiny_bert),
        "--per-query",
        str(per_query),
        "--json",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for name in RETRIEVAL_METRICS:
        assert name in result.output
    assert "4 judged queries, 12 documents, exact search" in result.output
    lines = [json.loads(line) for line in per_query.read_text().splitlines()]
    assert [line["query_id"] for line in lines] == list(QRELS)
    written = json.loads(out.read_text())
    assert list(written["metrics"]) == list(RETRIEVAL_METRICS)
    assert written["ignore_identical_ids"] is True
    for name in RETRIEVAL_METRICS:
        assert written["metrics"][name] == pytest.approx(sum(line[name] for line in lines) / len(lines))
    result = runner.invoke(app, [*args[:5], "--keep-identical-ids", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["ignore_identical_ids"] is False


def test_retrieval_with_an_index_checks_its_model(tiny_bert: Path, tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    import shutil

    from embedkit import build_index

    folder = write_beir(tmp_path / "beir")
    build_index(folder, tmp_path / "index", tiny_bert, IndexOptions(kind="flat", device="cpu"))
    result = runner.invoke(app, ["eval", "retrieval", str(folder), "--index", str(tmp_path / "index")])
    assert result.exit_code == 0, result.output
    assert f"12 documents, {tmp_path / 'index'} search" in " ".join(result.output.split())
    other = Path(shutil.copytree(tiny_bert, tmp_path / "other"))
    pooling = other / "1_Pooling" / "config.json"  # CLS instead of mean: another model
    pooling.write_text(json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    args = ["eval", "retrieval", str(folder), "--index", str(tmp_path / "index"), "--model", str(other)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "is not the model the index recorded" in result.output and "differs in pooling" in result.output
    result = runner.invoke(app, ["eval", "retrieval", str(folder), "--index", str(tmp_path / "absent")])
    assert result.exit_code == 2
    assert "index folder not found" in result.output


def test_retrieval_evaluates_what_search_does_by_default(tiny_bert: Path, tmp_path: Path) -> None:
    pytest.importorskip("faiss")
    from runtime_helpers import set_recorded_fusion

    from embedkit import build_index

    folder, index = write_beir(tmp_path / "beir"), tmp_path / "index"
    build_index(folder, index, tiny_bert, IndexOptions(kind="flat", device="cpu", calibrate=False))
    set_recorded_fusion(index, {"method": "zscore", "alpha": 0.6, "reason": "set by the test"})

    def metrics(*extra: str) -> tuple[str, dict]:
        out = tmp_path / "r.json"
        args = ["eval", "retrieval", str(folder), "--index", str(index), "--json", str(out), *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split()), json.loads(out.read_text())

    shown, default = metrics()
    assert "hybrid (zscore 0.6)" in shown and "what `embedkit search` does by default" in shown
    assert "fusion: the index's calibrated choice" in shown
    assert (default["mode"], default["fusion"], default["alpha"]) == ("hybrid", "zscore", 0.6)
    _, explicit = metrics("--mode", "hybrid", "--fusion", "zscore", "--alpha", "0.6")
    assert explicit["metrics"] == default["metrics"] and explicit["fusion_source"] == "asked for"
    shown, other = metrics("--fusion", "rrf")  # a fusion asked for wins over the recorded one
    assert "hybrid (rrf)" in shown and other["fusion"] == "rrf"
    set_recorded_fusion(index, {"method": "dense", "alpha": 0.7, "reason": "set by the test"})
    shown, dense = metrics()
    assert dense["mode"] == "dense" and "dense: what `embedkit search` does by default" in shown
    _, asked = metrics("--mode", "dense")
    assert asked["metrics"] == dense["metrics"]


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (
            "sentence1\tsentence2\tlabel\na\tb\t1\n",
            "x.tsv",
            "lacks score (columns found: 'sentence1', 'sentence2', 'label')",
        ),
        ("sentence1\tsentence2\tscore\na\tb\thigh\n", "x.tsv", "line 2: bad score 'high'"),
        (b"sentence1\tsentence2\tscore\n\xff\tb\t1\n", "x.tsv", "line 2 is not valid UTF-8"),
        ("", "x.csv", "x.csv is empty"),
        ("a", "x.parquet", "unknown format '.parquet'"),
        ("sentence1\tsentence2\tscore\tScore\na\tb\t1\t2\n", "x.tsv", "names column 'score' twice"),
    ],
)
def test_sts_bad_input_exits_2_with_one_line(
    tmp_path: Path, content: str | bytes, name: str, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = runner.invoke(app, ["eval", "sts", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0  # one line


def test_missing_model_and_missing_qrels_exit_2(tmp_path: Path) -> None:
    path = write_sts(tmp_path / "tiny.tsv")
    result = runner.invoke(app, ["eval", "sts", str(path), "--model", str(tmp_path / "no-model")])
    assert result.exit_code == 2
    assert "model folder not found" in result.output
    folder = write_beir(tmp_path / "beir")
    (folder / "qrels" / "test.tsv").unlink()
    result = runner.invoke(app, ["eval", "retrieval", str(folder)])
    assert result.exit_code == 2
    assert "has no qrels/test.tsv" in result.output


def test_eval_module_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys, embedkit.cli.evaluate; "
        "print([m for m in ('torch', 'transformers', 'onnxruntime', 'faiss') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
