"""`embedkit embed`, `embedkit index` and `embedkit search` through the CLI: output and exit codes."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.index import INDEX_FILE, SearchIndex
from embedkit.index.folder import index_files_dir


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="module")
def built(tiny_bert, tmp_path_factory, runner):
    """A corpus (jsonl with ids, titles and an extra field) and its index, built through the CLI."""
    folder = tmp_path_factory.mktemp("cli")
    corpus = folder / "corpus.jsonl.gz"
    records = [
        {"_id": "w1", "title": "wing", "text": "the wing flow is high", "year": 1960},
        {"_id": "g1", "text": "a man is playing guitar on the beach"},
        {"_id": "s1", "text": "shock wave and boundary layer"},
        {"_id": "c1", "text": "the cat eats food"},
    ]
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    result = runner.invoke(
        app, ["index", str(corpus), "--out", str(folder / "idx"), "--model", str(tiny_bert)]
    )
    assert result.exit_code == 0, result.output
    return folder, corpus


def test_index_reports_kind_and_device(built):
    folder, _ = built
    meta = json.loads((index_files_dir(folder / "idx") / "embedkit-index.json").read_text())
    assert (meta["kind"], meta["count"], meta["metric"]) == ("flat", 4, "inner_product")


def test_search_json_lines(built, runner):
    folder, _ = built
    query = ["search", str(folder / "idx"), "the cat eats food", "-k", "2", "--json", "--device", "cpu"]
    result = runner.invoke(app, query)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 1 and lines[0]["query"] == "the cat eats food"
    hits = lines[0]["hits"]
    assert [h["rank"] for h in hits] == [1, 2]
    with SearchIndex.load(folder / "idx") as index:
        expected = index.search_text("the cat eats food", k=2)[0]
    assert [h["id"] for h in hits] == [h.id for h in expected]
    assert hits[0]["score"] == pytest.approx(expected[0].score, abs=1e-6)
    assert "(torch, cpu)" in result.stderr  # the device is shown


def test_search_table_and_queries_file(built, runner):
    folder, _ = built
    queries = folder / "queries.txt"
    queries.write_text("wing flow\n\nguitar on the beach\n", encoding="utf-8")
    result = runner.invoke(app, ["search", str(folder / "idx"), "--queries", str(queries), "-k", "4"])
    assert result.exit_code == 0, result.output
    assert "wing flow" in result.stdout and "guitar on the beach" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "the wing flow is high" in line)
    assert [cell.strip() for cell in row.split("│")][3] == "wing"  # its title in the title column
    result = runner.invoke(app, ["search", str(folder / "idx"), "--queries", str(queries), "--json"])
    assert [json.loads(line)["query"] for line in result.stdout.splitlines()] == [
        "wing flow",
        "guitar on the beach",
    ]
    metadata = [
        h.get("metadata") for h in json.loads(result.stdout.splitlines()[0])["hits"] if h["id"] == "w1"
    ]
    assert metadata == [{"year": 1960}]


def test_index_says_how_many_blank_documents_it_skipped(runner, tiny_bert, tmp_path):
    # BEIR's loader keeps blank documents (cranfield has 2 of 1,400), so `eval` counts them.
    corpus = tmp_path / "corpus.jsonl"
    records = [{"_id": "a", "text": "wing flow"}, {"_id": "b", "text": " "}, {"_id": "c", "text": ""}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "idx"
    result = runner.invoke(app, ["index", str(corpus), "--out", str(out), "--model", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("indexed 1 documents (2 blank skipped) on torch/")


def test_append_through_the_cli(built, runner, tmp_path):
    folder, _ = built
    index_dir = tmp_path / "idx"
    import shutil

    shutil.copytree(folder / "idx", index_dir)
    more = tmp_path / "more.tsv"
    more.write_text("id\ttext\nt1\theat transfer at mach number five\n", encoding="utf-8")
    result = runner.invoke(
        app, ["index", str(more), "--out", str(index_dir), "--append", "--id-column", "id"]
    )
    assert result.exit_code == 0, result.output
    assert "appended 1 documents" in result.stdout and "now holds 5" in result.stdout
    query = "heat transfer at mach number five"
    result = runner.invoke(app, ["search", str(index_dir), query, "-k", "5", "--json"])
    scores = {h["id"]: h["dense_score"] for h in json.loads(result.stdout)["hits"]}
    assert scores["t1"] == pytest.approx(1.0, abs=1e-5)  # the new document is found by its own text


def test_embed_writes_vectors_and_ids(built, runner, tiny_bert, tmp_path):
    _, corpus = built
    out = tmp_path / "vectors.npy"
    command = ["embed", str(corpus), "--model", str(tiny_bert), "--out", str(out), "--device", "cpu"]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert "embedded 4 documents (32-d) on torch/cpu" in result.stdout
    assert np.load(out).shape == (4, 32)
    assert (tmp_path / "vectors.ids.txt").read_text().split() == ["w1", "g1", "s1", "c1"]


def _exit2(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]  # one clear line
    assert "Traceback" not in result.output


def test_bad_corpora_exit_2(runner, tiny_bert, tmp_path):
    out = str(tmp_path / "idx")
    model = ["--model", str(tiny_bert)]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    _exit2(runner, ["index", str(empty), "--out", out, *model], "empty corpus")
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "fine"}\n{"text": broken}\n')
    _exit2(runner, ["index", str(bad_json), "--out", out, *model], "line 2 is not valid JSON")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("first line\ncaf\xe9 au lait\n".encode("latin-1"))
    _exit2(runner, ["index", str(latin), "--out", out, *model], "line 2 is not valid UTF-8")
    unknown = tmp_path / "corpus.parquet"
    unknown.write_text("x")
    _exit2(runner, ["index", str(unknown), "--out", out, *model], "unknown format")
    table = tmp_path / "c.csv"
    table.write_text("body\nhello\n")
    _exit2(runner, ["index", str(table), "--out", out, *model], "has no column 'text'")
    _exit2(
        runner, ["embed", str(latin), "--out", str(tmp_path / "v.npy"), *model], "line 2 is not valid UTF-8"
    )
    fine = tmp_path / "fine.txt"
    fine.write_text("a fine document\n")
    _exit2(
        runner,
        ["index", str(fine), "--out", out, "--model", str(tmp_path / "nope")],
        "model folder not found",
    )
    assert not (tmp_path / "idx").exists()
    assert not (tmp_path / "v.npy").exists()


def test_search_errors_exit_2(built, runner, tiny_bert, tmp_path, tmp_path_factory):
    from tiny_models import make_tiny_bert

    folder, _ = built
    index_dir = folder / "idx"
    other = make_tiny_bert(tmp_path_factory.mktemp("other-model"), seed=3)
    _exit2(
        runner,
        ["search", str(index_dir), "wing", "--model", str(other)],
        "is not the model the index recorded",
    )
    wide = make_tiny_bert(tmp_path_factory.mktemp("wide-model"), hidden_size=48)
    _exit2(runner, ["search", str(index_dir), "wing", "--model", str(wide)], "gives 48-d vectors")
    _exit2(runner, ["search", str(index_dir)], "give one query text or --queries FILE")
    _exit2(runner, ["search", str(tmp_path / "missing"), "wing"], "index folder not found")
    _exit2(
        runner, ["index", str(folder / "corpus.jsonl.gz"), "--out", str(index_dir)], "already holds an index"
    )
    _exit2(
        runner,
        ["index", str(folder / "corpus.jsonl.gz"), "--out", str(tmp_path / "i"), "--kind", "ivf"],
        "unknown index kind",
    )


def test_truncated_index_file_exit_2(built, runner, tmp_path):
    import shutil

    folder, _ = built
    copy = tmp_path / "idx"
    shutil.copytree(folder / "idx", copy)
    files = index_files_dir(copy)
    data = (files / INDEX_FILE).read_bytes()
    (files / INDEX_FILE).write_bytes(data[:100])
    _exit2(runner, ["search", str(copy), "wing"], "is truncated or altered")
    _exit2(
        runner,
        ["index", str(folder / "corpus.jsonl.gz"), "--out", str(copy), "--append"],
        "is truncated or altered",
    )
    assert len((files / INDEX_FILE).read_bytes()) == 100  # the failed append changed nothing


def test_gpu_without_faiss_gpu_exit_2(built, runner):
    import faiss

    if faiss.get_num_gpus() > 0:
        pytest.skip("faiss sees a GPU here")
    folder, _ = built
    _exit2(runner, ["search", str(folder / "idx"), "wing", "--gpu"], "faiss sees no GPU")
