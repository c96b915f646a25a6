"""faiss on the GPU (`--device cuda`): the index goes to the GPU, is searched there, and is written back
in CPU form, with the CPU path's results; without GPU support it is one line naming the `gpu` extra.

No GPU here: `faiss_gpu_shim` stands in for faiss's GPU half (a logged copy of the CPU index), so the
tests prove the code path; the results are checked against the CPU path and a brute-force search.
"""

from __future__ import annotations

import json
from dataclasses import replace

import faiss_gpu_shim
import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force, clustered, write_jsonl
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.index import INDEX_FILE, IVF_PQ_MIN_DOCS, SearchIndex
from embedkit.index.faiss_gpu import GPU_MAX_K, faiss_gpu_for, needs_float16_tables
from embedkit.index.folder import index_files_dir
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_from_parts import build_index_from_vectors
from embedkit.jobs.index_options import IndexOptions
from embedkit.jobs.parts import Shard
from embedkit.jobs.sharding import embed_shard
from embedkit.jobs.streaming import CorpusOptions

faiss = pytest.importorskip("faiss")

DIM = 32  # the tiny BERT's hidden size: TableEncoder claims to be that model


def corpus_and_encoder(folder, model, vectors, queries=None):
    ids = [f"d{i}" for i in range(len(vectors))]
    texts = [f"text of {doc_id}" for doc_id in ids]
    table = dict(zip(texts, vectors, strict=True))
    table.update({f"query {j}": q for j, q in enumerate(queries if queries is not None else [])})
    return write_jsonl(folder / "corpus.jsonl", ids, texts), TableEncoder(model, table), ids


def no_gpu_faiss() -> None:
    if faiss.get_num_gpus() > 0:
        pytest.skip("this faiss sees a GPU")


def test_device_names_give_faiss_its_gpu(monkeypatch):
    faiss_gpu_shim.install(monkeypatch, gpus=2)
    def on(device: str) -> int | None:
        return faiss_gpu_for(Runtime(device))

    assert on("cpu") is None and on("auto") is None  # auto keeps faiss on the CPU
    assert on("cuda") == 0 and on("cuda:1") == 1
    with pytest.raises(InputError, match=r"--device cuda:2: faiss sees 2 GPU\(s\)"):
        on("cuda:2")
    with pytest.raises(InputError, match="unknown device 'gpu': use auto, cpu, cuda or cuda:N"):
        on("gpu")  # devices.py's words, not a second vocabulary


def test_cuda_without_gpu_faiss_is_one_line_naming_the_extra(tmp_path, tiny_bert):
    no_gpu_faiss()
    with pytest.raises(InputError) as caught:
        faiss_gpu_for(Runtime("cuda"))
    message = str(caught.value)
    assert "faiss sees no GPU" in message and "pip install 'embedkit[gpu]'" in message
    assert "faiss-cpu" in message  # which faiss is installed
    docs = np.random.default_rng(0).standard_normal((20, DIM))
    corpus, _, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    runner = CliRunner()
    built = runner.invoke(
        app, ["index", str(corpus), "--out", str(tmp_path / "idx"), "--model", str(tiny_bert)]
    )
    assert built.exit_code == 0, built.output
    for args in (
        ["index", str(corpus), "--out", str(tmp_path / "gpu"), "--model", str(tiny_bert), "--device", "cuda"],
        ["search", str(tmp_path / "idx"), "wing", "--device", "cuda"],
        ["search", str(tmp_path / "idx"), "wing", "--device", "cuda:1", "--mode", "dense"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "embedkit[gpu]" in errors[0] and "Traceback" not in result.output
    assert not (tmp_path / "gpu").exists() or not any((tmp_path / "gpu").iterdir())  # nothing written


@pytest.mark.parametrize("kind", ["flat", "ivf-pq"])
def test_built_and_searched_on_the_gpu_as_on_the_cpu(tmp_path, tiny_bert, monkeypatch, kind):
    count = 200 if kind == "flat" else IVF_PQ_MIN_DOCS + 16
    data = clustered(count + 20, DIM, clusters=16, seed=3)
    docs, queries = data[:count], data[count:]
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    options = CorpusOptions(chunk_size=4096)
    build_index(corpus, tmp_path / "cpu", encoder, IndexOptions(kind=kind, corpus=options, lexical=False))
    log = faiss_gpu_shim.install(monkeypatch)
    report = build_index(
        corpus,
        tmp_path / "gpu",
        encoder,
        IndexOptions(kind=kind, device="cuda", corpus=options, lexical=False),
    )
    assert report.faiss_device == "cuda:0" and report.device == "cpu"  # the encoder stays where it is
    cpu_class = "IndexFlatIP" if kind == "flat" else "IndexIVFPQ"
    assert log.to_gpu == [(0, cpu_class, False)] and log.to_cpu == 1
    assert {"add"} <= log.methods() and (kind == "flat" or "train" in log.methods())
    written = faiss.read_index(str(index_files_dir(tmp_path / "gpu") / INDEX_FILE))
    assert type(written).__name__ == cpu_class and written.ntotal == count  # saved in CPU form

    log.calls.clear()
    with (
        SearchIndex.load(tmp_path / "gpu", device="cuda") as on_gpu,
        SearchIndex.load(tmp_path / "cpu") as on_cpu,
    ):
        assert (on_gpu.faiss_device, on_cpu.faiss_device) == ("cuda:0", "cpu")
        gpu_scores, gpu_found = on_gpu.search(queries, k=10)
        assert ("search", 0) in log.calls  # the queries reached the GPU index
        cpu_scores, cpu_found = on_cpu.search(queries, k=10)
    assert gpu_found == cpu_found
    np.testing.assert_allclose(gpu_scores, cpu_scores, atol=1e-6)
    if kind == "flat":  # and both are exact
        _, rows = brute_force(docs, queries, 10)
        assert gpu_found == [[ids[r] for r in row] for row in rows]


def test_hnsw_has_no_gpu_index(tmp_path, tiny_bert, monkeypatch):
    docs = np.random.default_rng(1).standard_normal((30, DIM))
    corpus, encoder, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    build_index(corpus, tmp_path / "hnsw", encoder, IndexOptions(kind="hnsw", lexical=False))
    log = faiss_gpu_shim.install(monkeypatch)
    with pytest.raises(InputError, match="no GPU HNSW"):
        build_index(corpus, tmp_path / "other", encoder, IndexOptions(kind="hnsw", device="cuda"))
    with pytest.raises(
        InputError, match="faiss has no GPU HNSW index: --device cuda builds and searches flat"
    ):
        SearchIndex.load(tmp_path / "hnsw", device="cuda")
    assert log.to_gpu == []


def test_float16_lookup_tables_only_where_float32_ones_overflow_shared_memory():
    assert not needs_float16_tables(faiss.IndexFlatIP(384))  # float16 storage would change its scores
    # all-MiniLM's 384-d: ivf-pq's 48 sub-quantizers x 256 x 4 bytes = 48 KiB, the limit exactly
    assert not needs_float16_tables(faiss.IndexIVFPQ(faiss.IndexFlatIP(384), 384, 64, 48, 8))
    assert needs_float16_tables(faiss.IndexIVFPQ(faiss.IndexFlatIP(768), 768, 64, 96, 8))


def test_from_vectors_builds_on_the_gpu(tmp_path, tiny_bert, monkeypatch):
    docs = np.random.default_rng(4).standard_normal((23, DIM)).astype(np.float32)
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    for i in range(2):
        embed_shard(corpus, tmp_path / "parts", Shard(i, 2), encoder)
    log = faiss_gpu_shim.install(monkeypatch)
    report = build_index_from_vectors(
        tmp_path / "parts", corpus, tmp_path / "idx", device="cuda", lexical=False
    )
    assert report.faiss_device == "cuda:0" and log.to_cpu == 1 and "add" in log.methods()
    with SearchIndex.load(tmp_path / "idx") as index:
        _, found = index.search(docs[:5], k=1)
    assert found == [[doc_id] for doc_id in ids[:5]]  # each document finds itself


def test_the_cli_builds_and_searches_with_faiss_on_the_gpu(tmp_path, tiny_bert, monkeypatch):
    """`index --device cuda` and `search --device cuda` as a user runs them; the model is opened on the
    CPU (no GPU here), faiss on the shim's GPU."""
    import embedkit.index.search as search_module
    import embedkit.jobs.index_build as build_module

    opened = []  # (opener, the device the CLI asked for)
    as_encoder, open_model_for = build_module.as_encoder, search_module.open_model_for

    def on_cpu(open_model):
        def opener(*args):
            opened.append((open_model.__name__, args[-1].device))
            return open_model(*args[:-1], replace(args[-1], device="cpu"))

        return opener

    monkeypatch.setattr(build_module, "as_encoder", on_cpu(as_encoder))
    monkeypatch.setattr(search_module, "open_model_for", on_cpu(open_model_for))
    records = [
        {"_id": "w1", "text": "the wing flow is high"},
        {"_id": "g1", "text": "a man is playing guitar on the beach"},
        {"_id": "s1", "text": "shock wave and boundary layer"},
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))
    runner = CliRunner()
    model = ["--model", str(tiny_bert)]
    assert runner.invoke(app, ["index", str(corpus), "--out", str(tmp_path / "cpu"), *model]).exit_code == 0
    log = faiss_gpu_shim.install(monkeypatch)
    built = runner.invoke(
        app, ["index", str(corpus), "--out", str(tmp_path / "gpu"), *model, "--device", "cuda"]
    )
    assert built.exit_code == 0, built.output
    assert "faiss on cuda:0" in built.stdout and log.to_cpu == 1
    searched = {}
    for name in ("cpu", "gpu"):
        device = ["--device", "cuda"] if name == "gpu" else ["--device", "cpu"]
        result = runner.invoke(
            app, ["search", str(tmp_path / name), "shock wave", "--json", "-k", "3", *device]
        )
        assert result.exit_code == 0, result.output
        searched[name] = [(h["id"], round(h["score"], 5)) for h in json.loads(result.stdout)["hits"]]
    assert searched["gpu"] == searched["cpu"] and ("search", 0) in log.calls
    assert (
        "faiss on cuda:0"
        in runner.invoke(app, ["search", str(tmp_path / "gpu"), "wing", "--device", "cuda"]).stderr
    )
    assert {("as_encoder", "cuda"), ("open_model_for", "cuda")} <= set(opened)
    too_many = runner.invoke(app, ["search", str(tmp_path / "gpu"), "wing", "--device", "cuda", "-k", "5000"])
    assert too_many.exit_code == 2 and f"at most {GPU_MAX_K} results" in too_many.stderr


def test_gpu_is_device_cuda_with_a_deprecation_line(tmp_path, tiny_bert, monkeypatch):
    """`--gpu` (the older switch) runs as `--device cuda`: the same `Runtime` reaches the index and
    the model, after one warning line; with `--device cpu` it is one error line, exit 2."""
    import embedkit.index.search as search_module
    import embedkit.jobs.index_build as build_module

    faiss_gpu_shim.install(monkeypatch)
    docs = np.random.default_rng(5).standard_normal((12, DIM))
    corpus, _, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    runner = CliRunner()
    model = ["--model", str(tiny_bert)]
    assert runner.invoke(app, ["index", str(corpus), "--out", str(tmp_path / "idx"), *model]).exit_code == 0

    reached = []  # the Runtime each run hands to faiss's placement

    def stop_at_placement(runtime):
        reached.append(runtime)
        raise InputError("stopped where faiss is placed")

    monkeypatch.setattr(search_module, "placement_for", stop_at_placement)
    monkeypatch.setattr(build_module, "placement_for", stop_at_placement)
    runs = {
        "search": ["search", str(tmp_path / "idx"), "wing"],
        "index": ["index", str(corpus), "--out", str(tmp_path / "new"), *model],
    }
    for command, args in runs.items():
        reached.clear()
        old = runner.invoke(app, [*args, "--gpu"])
        new = runner.invoke(app, [*args, "--device", "cuda"])
        assert reached[0] == reached[1] == Runtime("cuda"), command
        assert old.stderr.splitlines() == [
            "warning: --gpu is deprecated: use --device cuda",
            "error: stopped where faiss is placed",
        ]
        assert new.stderr.splitlines() == ["error: stopped where faiss is placed"]
        conflict = runner.invoke(app, [*args, "--gpu", "--device", "cpu"])
        assert conflict.exit_code == 2 and len(reached) == 2  # refused before any placement
        assert conflict.stderr.splitlines() == [
            "error: --gpu runs on the GPU and --device cpu on the CPU: give one (--device cuda)"
        ]


def test_gpu_searches_with_faiss_and_the_model_on_gpu_0(tmp_path, tiny_bert, monkeypatch):
    """The whole `search --gpu` run: faiss on the shim's GPU 0, the model asked for on cuda (opened
    on the CPU here, where there is none), the same hits as on the CPU."""
    import embedkit.index.search as search_module

    asked = []
    open_model_for = search_module.open_model_for

    def on_cpu(meta, model, runtime):
        asked.append(runtime.device)
        return open_model_for(meta, model, replace(runtime, device="cpu"))

    monkeypatch.setattr(search_module, "open_model_for", on_cpu)
    docs = np.random.default_rng(6).standard_normal((12, DIM))
    corpus, _, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    runner = CliRunner()
    model = ["--model", str(tiny_bert)]
    assert runner.invoke(app, ["index", str(corpus), "--out", str(tmp_path / "idx"), *model]).exit_code == 0
    query = ["search", str(tmp_path / "idx"), "text of d3", "--json", "--mode", "dense"]
    on_cpu_run = runner.invoke(app, [*query, "--device", "cpu"])
    log = faiss_gpu_shim.install(monkeypatch)
    on_gpu_run = runner.invoke(app, [*query, "--gpu"])
    assert on_gpu_run.exit_code == 0, on_gpu_run.output
    assert "faiss on cuda:0" in on_gpu_run.stderr and ("search", 0) in log.calls
    assert asked == ["cpu", "cuda"]  # --gpu: the model on the GPU too, no longer where --device says
    assert json.loads(on_gpu_run.stdout)["hits"] == json.loads(on_cpu_run.stdout)["hits"]


def test_the_library_gpu_keyword_warns_and_means_cuda(tmp_path, tiny_bert, monkeypatch):
    docs = np.random.default_rng(7).standard_normal((12, DIM)).astype(np.float32)
    corpus, encoder, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    build_index(corpus, tmp_path / "idx", encoder, IndexOptions(lexical=False))
    faiss_gpu_shim.install(monkeypatch)
    with pytest.warns(DeprecationWarning, match="use Runtime\\(device='cuda'\\)"):
        index = SearchIndex.load(tmp_path / "idx", gpu=True)
    with index:
        assert index.faiss_device == "cuda:0"
    with SearchIndex.load(tmp_path / "idx", runtime=Runtime("cuda")) as index:
        assert index.faiss_device == "cuda:0"
    with pytest.raises(InputError, match="not both"):
        SearchIndex.load(tmp_path / "idx", runtime=Runtime("cuda"), device="cpu")
