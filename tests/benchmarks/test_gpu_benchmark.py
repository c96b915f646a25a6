"""benchmarks/gpu.py run on the CPU with a tiny model (`--device cpu --quick`): every row in its JSON,
each figure its texts over its seconds, each ratio that figure over the ceiling's, computed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROWS = {  # the rows `make gpu-check` reads, by name
    "encode_first",
    "encode_later",
    "ceiling",
    "torch",
    "tokenize",
    "sentence_transformers",
    "serve_32x1",
    "serve_32x64",
    "serve_128x1",
}


@pytest.fixture(scope="module")
def tiny_export(tiny_bert, tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    from embedkit.export import export_model

    return export_model(tiny_bert, tmp_path_factory.mktemp("gpu-bench") / "onnx", progress=False).out_dir


def test_the_corpus_is_the_issues_28481_unique_texts(load_benchmark, shared_data):
    texts = load_benchmark("gpu").corpus_texts()
    assert len(texts) == 28_481 == len(set(texts)) and all(t == t.strip() and t for t in texts)


def test_a_quick_cpu_run_reports_every_row_and_consistent_ratios(
    tiny_export, tiny_bert, tmp_path, shared_data
):
    out = tmp_path / "gpu.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--quick"]
    command += ["--model", str(tiny_export), "--torch-model", str(tiny_bert), "--json", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # a tiny model on a shared machine
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["device"], report["precision"], report["serve_error"]) == ("cpu", "fp32", None)
    rows = {r["name"]: r for r in report["rows"]}
    assert rows.keys() == ROWS and len(report["rows"]) == len(ROWS)
    ceiling = rows["ceiling"]["texts"] / rows["ceiling"]["seconds"]
    offline = rows["encode_later"]["texts"] / rows["encode_later"]["seconds"]
    for name, r in rows.items():
        assert r["per_s"] == pytest.approx(r["texts"] / r["seconds"], rel=1e-9)
        assert r["ratio_to_ceiling"] == pytest.approx(r["per_s"] / ceiling, rel=1e-9)
        if name.startswith("serve_"):
            assert r["of_offline"] == pytest.approx(r["per_s"] / offline, rel=1e-9)
            assert {"p50_ms", "p99_ms"} <= r.keys() and r["seconds"] == 1.0  # --quick's window
        else:
            assert r["texts"] == report["texts"] == 96
    assert rows["ceiling"]["ratio_to_ceiling"] == 1.0
    split = report["encode_split"]  # the parts of one more pass: each inside its wall time, none zero
    assert split.keys() == {"wall_s", "tokenize_s", "pad_s", "copy_s", "run_s"}
    assert 0 < split["run_s"] <= split["wall_s"] and 0 <= split["copy_s"] <= split["run_s"]
    assert split["tokenize_s"] > 0 and split["pad_s"] > 0
    assert rows["sentence_transformers"]["batch_size"] == 64
    printed = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(printed) == 1 + len(ROWS)  # the table: its header and a line a row


def test_cuda_without_a_gpu_is_one_line_exit_2(shared_data):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: --device cuda, but torch sees no CUDA GPU (--device cpu runs every row there)"
    ]
