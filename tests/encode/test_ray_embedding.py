"""`embed_with_ray`: a local Ray cluster writes exactly the vectors and ids of single-process `embed`."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from fixture_text import AERO_WORDS
from runtime_helpers import write_jsonl

from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError, RunFailure
from embedkit.jobs.distributed import RAY_MISSING, _worker_error, embed_with_ray, import_ray
from embedkit.jobs.parts import read_parts
from embedkit.jobs.streaming import CorpusOptions, embed_to_file


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus_and_reference(tmp_path_factory, tiny_bert):
    folder = tmp_path_factory.mktemp("ray")
    words = ["the", *AERO_WORDS[:10]]  # 11 words: documents of 3 to 11 of them, in varied orders
    texts = [" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 9)) for i in range(41)]
    corpus = write_jsonl(folder / "corpus.jsonl", [f"r{i}" for i in range(41)], texts)
    encoder = load_encoder(tiny_bert, device="cpu")
    embed_to_file(corpus, folder / "single.npy", encoder)
    ids = (folder / "single.ids.txt").read_text(encoding="utf-8").splitlines()
    return folder, corpus, np.load(folder / "single.npy"), ids


def test_ray_parts_equal_the_single_process_output(ray_cluster, corpus_and_reference, tiny_bert, tmp_path):
    _, corpus, vectors, ids = corpus_and_reference
    report = embed_with_ray(
        corpus, tmp_path / "parts", tiny_bert, device="cpu", options=CorpusOptions(chunk_size=8)
    )
    assert (report.parts, report.workers, report.count, report.dim, report.device) == (2, 2, 41, 32, "cpu")
    parts = read_parts(tmp_path / "parts")  # complete and consistent, or this raises
    got = np.concatenate([np.load(p.npy) for p in parts])
    np.testing.assert_allclose(got, vectors, rtol=0, atol=1e-6)
    assert [i for p in parts for i in p.ids.read_text(encoding="utf-8").splitlines()] == ids
    sidecar = json.loads(parts[1].npy.with_suffix(".json").read_text())
    assert (sidecar["model"], sidecar["start"], sidecar["total"]) == (str(tiny_bert.resolve()), 20, 41)


def test_ray_with_more_workers_than_documents(ray_cluster, corpus_and_reference, tiny_bert, tmp_path):
    folder, *_ = corpus_and_reference
    corpus = write_jsonl(folder / "tiny.jsonl", ["only"], ["the only document"])
    report = embed_with_ray(corpus, tmp_path / "parts", tiny_bert, device="cpu", num_workers=3)
    assert (report.parts, report.workers, report.count) == (1, 1, 1)  # no empty parts from extra workers
    expected = load_encoder(tiny_bert, device="cpu").encode(["the only document"])
    np.testing.assert_allclose(np.load(tmp_path / "parts" / "part-0-of-1.npy"), expected, atol=1e-6)


def test_bad_requests_fail_before_ray_runs(ray_cluster, corpus_and_reference, tiny_bert, tmp_path):
    _, corpus, *_ = corpus_and_reference
    with pytest.raises(InputError, match="use --device cuda"):
        embed_with_ray(corpus, tmp_path / "p", tiny_bert, device="cuda:1")
    with pytest.raises(InputError, match="the Ray cluster has no GPU"):
        embed_with_ray(corpus, tmp_path / "p", tiny_bert, device="cuda")
    with pytest.raises(InputError, match="model folder not found"):
        embed_with_ray(corpus, tmp_path / "p", tmp_path / "no-model", device="cpu")
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())


def test_a_workers_embedkit_error_keeps_its_kind():
    wrapped = RuntimeError("ray task failed")
    wrapped.__cause__ = InputError("document id 'a\\nb' contains a line break")
    assert isinstance(_worker_error(wrapped), InputError)
    other = _worker_error(RuntimeError("actor died\nnode lost"))
    assert isinstance(other, RunFailure) and str(other) == "the Ray job failed: node lost"


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(InputError) as caught:
        import_ray()
    expected = (
        "embed --ray needs the distributed extra (ray[data] not installed): "
        "pip install 'embedkit[distributed]'"
    )
    assert str(caught.value) == RAY_MISSING == expected
