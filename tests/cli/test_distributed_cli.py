"""`embed --shard`, `embed --ray` and `index --from-vectors` through the CLI: outputs and exit codes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.index import SearchIndex
from embedkit.index.folder import index_files_dir

SHARDS = 3


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def exit2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr  # one line
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_bert, runner):
    """A 20-line .txt corpus embedded whole and as 3 shards (run in reverse order), through the CLI."""
    folder = tmp_path_factory.mktemp("cli-parts")
    corpus = folder / "corpus.txt"
    lines = [f"the wing flow number {i} {'is high ' * (i % 5)}".strip() for i in range(20)]
    corpus.write_text("\n".join(lines[:7] + [""] + lines[7:]) + "\n", encoding="utf-8")  # a blank line
    model = ["--model", str(tiny_bert), "--device", "cpu"]
    result = runner.invoke(app, ["embed", str(corpus), "--out", str(folder / "all.npy"), *model])
    assert result.exit_code == 0, result.output
    for index in reversed(range(SHARDS)):
        args = ["embed", str(corpus), "--out", str(folder / "parts"), "--shard", f"{index}/{SHARDS}", *model]
        result = runner.invoke(app, [*args, "--chunk-size", "4"])
        assert result.exit_code == 0, result.output
        assert f"embedded part-{index}-of-{SHARDS}" in result.stdout
    return folder, corpus


def test_shards_concatenate_to_plain_embed(sharded):
    folder, _ = sharded
    names = [f"part-{i}-of-{SHARDS}" for i in range(SHARDS)]
    vectors = np.concatenate([np.load(folder / "parts" / f"{n}.npy") for n in names])
    np.testing.assert_allclose(vectors, np.load(folder / "all.npy"), atol=1e-5)
    ids = [line for n in names for line in (folder / "parts" / f"{n}.ids.txt").read_text().splitlines()]
    assert ids == (folder / "all.ids.txt").read_text().splitlines()
    assert ids[6:9] == ["7", "9", "10"]  # line numbers, the blank line 8 skipped


def test_index_from_vectors_searches_like_index(sharded, runner, tiny_bert):
    folder, corpus = sharded
    out = folder / "from-parts"
    args = ["index", "--from-vectors", str(folder / "parts"), "--corpus", str(corpus), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "indexed 20 vectors" in result.stdout
    result = runner.invoke(
        app, ["index", str(corpus), "--out", str(folder / "direct"), *["--model", str(tiny_bert)]]
    )
    assert result.exit_code == 0, result.output
    queries = ["wing flow number 3", "is high is high"]
    with SearchIndex.load(out) as index, SearchIndex.load(folder / "direct") as direct:
        assert index.meta["model"] == str(tiny_bert.resolve())  # recorded from the parts
        got = index.search_text(queries, k=5, mode="hybrid")
        want = direct.search_text(queries, k=5, mode="hybrid")
    assert [[h.id for h in row] for row in got] == [[h.id for h in row] for row in want]
    meta = json.loads((index_files_dir(out) / "embedkit-index.json").read_text())
    assert [p["vectors"] for p in meta["sources"][0]["parts"]] == [6, 7, 7]


def test_index_from_vectors_quantized_and_cut_searches_like_index(sharded, runner, tiny_bert):
    """--quantize and --dim reach `index --from-vectors`: the same dense hits as `index` with them."""
    folder, corpus = sharded
    settings = ["--quantize", "binary", "--dim", "16", "--kind", "flat"]
    parts = ["--from-vectors", str(folder / "parts"), "--corpus", str(corpus)]
    result = runner.invoke(app, ["index", *parts, "--out", str(folder / "cut-parts"), *settings])
    assert result.exit_code == 0, result.output
    assert "quantize=binary" in result.stdout
    direct = ["index", str(corpus), "--out", str(folder / "cut-direct"), "--model", str(tiny_bert)]
    result = runner.invoke(app, [*direct, *settings])
    assert result.exit_code == 0, result.output
    queries = ["wing flow number 3", "is high is high"]
    with SearchIndex.load(folder / "cut-parts") as index, SearchIndex.load(folder / "cut-direct") as one:
        assert (index.dim, index.meta["model_dim"], index.meta["params"]["quantize"]) == (16, 32, "binary")
        got, want = index.search_text(queries, k=5, mode="dense"), one.search_text(queries, k=5, mode="dense")
    assert [[(h.id, round(h.score, 5)) for h in row] for row in got] == [
        [(h.id, round(h.score, 5)) for h in row] for row in want
    ]


def test_missing_and_corrupt_parts_exit_2(sharded, runner, tmp_path):
    import shutil

    folder, corpus = sharded
    parts = tmp_path / "parts"
    shutil.copytree(folder / "parts", parts)
    build = ["index", str(corpus), "--from-vectors", str(parts), "--out", str(tmp_path / "idx")]
    npy = parts / "part-1-of-3.npy"
    npy.write_bytes(npy.read_bytes()[:-4])
    exit2(runner, build, "part part-1-of-3: part-1-of-3.npy is truncated or altered")
    npy.unlink()
    exit2(runner, build, "missing part-1-of-3.npy")
    for name in ("part-1-of-3.ids.txt", "part-1-of-3.json"):
        (parts / name).unlink()
    exit2(runner, build, "missing part-1-of-3")
    shutil.rmtree(parts)
    shutil.copytree(folder / "parts", parts)
    exit2(runner, [*build, "--append"], "--from-vectors builds a new index: drop --append")
    exit2(
        runner, ["index", "--from-vectors", str(parts), "--out", str(tmp_path / "idx")], "missing the corpus"
    )


def test_usage_errors_exit_2(sharded, runner, tmp_path, monkeypatch):
    folder, corpus = sharded
    embed = ["embed", str(corpus), "--device", "cpu"]
    exit2(runner, [*embed, "--out", str(tmp_path), "--shard", "4/4"], "--shard must be I/N with 0 <= I < N")
    exit2(runner, [*embed, "--out", str(tmp_path), "--shard", "1-of-4"], "(I is 0-based, e.g. 0/4)")
    exit2(runner, [*embed, "--out", str(tmp_path / "v.npy"), "--shard", "0/2"], "--out must be a folder")
    exit2(runner, [*embed, "--out", str(tmp_path), "--shard", "0/2", "--ray"], "exclude each other")
    exit2(runner, [*embed, "--out", str(tmp_path), "--num-workers", "2"], "need --ray")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    exit2(runner, [*embed, "--out", str(tmp_path / "p"), "--ray"], "pip install 'embedkit[distributed]'")


def test_index_gpu_without_faiss_gpu_exits_2(sharded, runner, tmp_path):
    import faiss

    if faiss.get_num_gpus() > 0:
        pytest.skip("faiss sees a GPU here")
    folder, corpus = sharded
    parts = ["--from-vectors", str(folder / "parts")]
    exit2(
        runner,
        ["index", str(corpus), *parts, "--out", str(tmp_path / "i"), "--device", "cuda"],
        "faiss sees no GPU",
    )
    exit2(
        runner, ["index", str(corpus), "--out", str(tmp_path / "j"), "--device", "cuda"], "faiss sees no GPU"
    )


def test_embed_ray_starts_and_stops_its_own_cluster(sharded, runner, tiny_bert, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    folder, corpus = sharded
    if ray.is_initialized():
        pytest.skip("a Ray cluster is already running in this process")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a new local cluster, never one this machine runs
    args = ["embed", str(corpus), "--out", str(tmp_path / "parts"), "--ray", "--num-workers", "2"]
    result = runner.invoke(app, [*args, "--model", str(tiny_bert), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "with 2 Ray worker(s) on cpu" in result.stdout and "wrote 2 parts" in result.stdout
    assert not ray.is_initialized()
    vectors = np.concatenate([np.load(tmp_path / "parts" / f"part-{i}-of-2.npy") for i in range(2)])
    np.testing.assert_allclose(vectors, np.load(folder / "all.npy"), atol=1e-5)


def test_bad_device_or_precision_creates_no_output_folder(runner, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("wing flow\nshock waves\n")
    out = tmp_path / "parts"
    exit2(
        runner,
        ["embed", str(corpus), "--out", str(out), "--shard", "0/2", "--device", "gpu9"],
        "unknown device 'gpu9'",
    )
    exit2(
        runner,
        ["embed", str(corpus), "--out", str(out), "--shard", "0/2", "--precision", "fp8"],
        "unknown precision 'fp8'",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]
