"""benchmarks/search.py --device: faiss on the GPU against faiss-cpu. The CPU half runs here; the GPU
half runs on faiss_gpu_shim (no GPU here), which proves it searches through `index --device cuda`'s path."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import faiss_gpu_shim
import pytest

ROOT = Path(__file__).resolve().parents[2]
faiss = pytest.importorskip("faiss")


def test_the_cpu_half_runs_and_writes_its_rows(tmp_path):
    out = tmp_path / "search.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--device", "cpu", "--kinds", "flat"]
    command += ["--n", "2000", "--queries", "40", "--single", "5", "--repeats", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["devices"]
    assert (row["kind"], row["device"], row["recall@10"], row["x_cpu_batched"]) == ("flat", "cpu", 1.0, 1.0)


def test_cuda_without_gpu_faiss_is_one_line_exit_2():
    if faiss.get_num_gpus() > 0:
        pytest.skip("this faiss sees a GPU")
    command = [sys.executable, str(ROOT / "benchmarks" / "search.py"), "--device", "cuda", "--n", "100"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "pip install 'embedkit[gpu]'" in done.stderr


def test_the_gpu_half_builds_and_searches_on_the_gpu(load_benchmark, monkeypatch):
    import numpy as np

    bench = load_benchmark("search")
    data = bench.clustered_vectors(10_040, 32, clusters=64, local_dims=8, seed=0)
    docs, queries = np.ascontiguousarray(data[:10_000]), np.ascontiguousarray(data[10_000:])
    log = faiss_gpu_shim.install(monkeypatch)
    args = argparse.Namespace(device="cuda", kinds="flat,ivf-pq", single=5, repeats=1)
    rows = {(r["kind"], r["device"]): r for r in bench.run_devices(docs, queries, args)["devices"]}
    assert rows.keys() == {("flat", "cpu"), ("flat", "cuda:0"), ("ivf-pq", "cpu"), ("ivf-pq", "cuda:0")}
    assert [(gpu, cls) for gpu, cls, _ in log.to_gpu] == [(0, "IndexFlatIP"), (0, "IndexIVFPQ")]
    assert {"add", "train", "search"} <= log.methods()  # built and searched on the "GPU"
    for kind in ("flat", "ivf-pq"):
        cpu, gpu = rows[(kind, "cpu")], rows[(kind, "cuda:0")]
        assert gpu["recall@10"] == cpu["recall@10"]  # the shim computes as the CPU does
        assert gpu["x_cpu_batched"] == pytest.approx(gpu["batched_qps"] / cpu["batched_qps"])
    assert rows[("flat", "cuda:0")]["recall@10"] == 1.0
