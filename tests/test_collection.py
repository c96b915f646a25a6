"""The Python collection API (`embedkit.collection`) against the CLI on the same data, against
cosines computed here, and against its own guarantees (bad input, the writer's lock)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import embedkit
from embedkit.cli.app import app
from embedkit.search.hits import HIT_FIELDS

ROOT = Path(__file__).resolve().parent.parent
WORDS = "shock wave wing boundary layer heat flow pressure drag lift nozzle jet".split()  # noqa: SIM905


def records(first: int, count: int, tag: str = "") -> list[dict]:
    """Documents d{first}.. with a few shared words each and a year to filter on."""
    out = []
    for n in range(first, first + count):
        words = [WORDS[(n * 7 + j * 3) % len(WORDS)] for j in range(6)]
        text = " ".join(words) + tag
        out.append({"_id": f"d{n}", "title": f"note {n}{tag}", "text": text, "year": 2000 + n})
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def add_args(rows: list[dict]) -> dict:
    return {
        "documents": [r["text"] for r in rows],
        "ids": [r["_id"] for r in rows],
        "metadatas": [{"year": r["year"]} for r in rows],
        "titles": [r["title"] for r in rows],
    }


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


FIRST, MORE, REPLACED = records(0, 12), records(12, 8), records(3, 1, " again") + records(15, 1, " again")
QUERIES = ["shock wave on a wing", "heat flow in a nozzle", "lift and drag"]


@pytest.fixture(scope="module")
def both(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, embedkit.Collection]:
    """The same edits made by the CLI (an index folder) and by a collection."""
    folder = tmp_path_factory.mktemp("collection")
    by_cli = folder / "cli-index"
    common = ["--model", str(tiny_onnx), "--device", "cpu", "--no-calibrate"]
    cli("index", str(write_jsonl(folder / "first.jsonl", FIRST)), "--out", str(by_cli), *common)
    cli("index", str(write_jsonl(folder / "more.jsonl", MORE)), "--out", str(by_cli), "--append", *common)
    replaced = write_jsonl(folder / "replaced.jsonl", REPLACED)
    cli("index", str(replaced), "--out", str(by_cli), "--append", "--upsert", *common)
    cli("delete", str(by_cli), "d5")

    notes = embedkit.create_collection(folder / "api-index", tiny_onnx, device="cpu", calibrate=False)
    notes.add(**add_args(FIRST))
    notes.add(**add_args(MORE))
    notes.upsert(**add_args(REPLACED))
    notes.delete(["d5"])
    return by_cli, notes


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
@pytest.mark.parametrize("where", [None, "year >= 2010"])
def test_a_collection_answers_as_embedkit_search_does(both, mode: str, where: str | None) -> None:
    by_cli, notes = both
    filters = ["--where", where] if where else []
    for query in QUERIES:
        every = ["--include", ",".join(HIT_FIELDS)]
        line = cli("search", str(by_cli), query, "-k", "5", "--mode", mode, "--json", *every, *filters)
        expected = json.loads(line)["hits"]
        got = notes.query(query, k=5, mode=mode, where=where, include=HIT_FIELDS)
        assert [h["id"] for h in got] == [h["id"] for h in expected]
        for mine, theirs in zip(got, expected, strict=True):
            assert mine["score"] == pytest.approx(theirs["score"], abs=1e-5)
            assert {k: v for k, v in mine.items() if "score" not in k} == {
                k: v for k, v in theirs.items() if "score" not in k
            }
        assert not where or all(h["metadata"]["year"] >= 2010 for h in got)


def test_dense_scores_are_the_cosines_of_the_documents_held(both, tiny_onnx: Path) -> None:
    """The reference: every held document embedded here and ranked by numpy."""
    _, notes = both
    held = {r["_id"]: r for r in FIRST + MORE if r["_id"] != "d5"} | {r["_id"]: r for r in REPLACED}
    ids = sorted(held)
    encoder = embedkit.load_encoder(tiny_onnx, device="cpu")
    docs = encoder.encode([f"{held[i]['title']} {held[i]['text']}" for i in ids], normalize=True)
    for query in QUERIES:
        cosines = docs @ encoder.encode([query], normalize=True)[0]
        order = np.argsort(-cosines, kind="stable")[:4]
        got = notes.query(query, k=4, mode="dense", include=["text", "scores"])
        assert [h["score"] for h in got] == pytest.approx([float(cosines[j]) for j in order], abs=1e-5)
        assert [h["text"] for h in got] == [held[ids[j]]["text"] for j in order]
    assert notes.count() == len(held) == 19
    got = notes.get(["d3", "d5"])  # Chroma's GetResult: an id not held is left out
    assert (got["ids"], got["documents"], got["metadatas"]) == (
        ["d3"],
        [held["d3"]["text"]],
        [{"year": 2003}],
    )


def test_include_chooses_the_fields_and_the_default_leaves_out_the_text(both) -> None:
    _, notes = both
    default = notes.query("shock wave", k=3, mode="hybrid")
    shown = {"rank", "id", "score", "title", "metadata"}
    assert default and all("text" not in h and shown <= set(h) for h in default)
    assert any("snippet" in h for h in default)
    bare = notes.query(["shock wave", "lift"], k=2, include=[])
    assert [sorted(h) for hits in bare for h in hits] == [["id", "rank", "score"]] * 4
    with pytest.raises(embedkit.InputError, match="unknown hit field 'documents'"):
        notes.query("shock", include=["documents"])


def test_bad_input_is_an_input_error_and_writes_nothing(tiny_onnx: Path, tmp_path: Path) -> None:
    from embedkit.index.layout import index_files_dir

    notes = embedkit.create_collection(tmp_path / "idx", tiny_onnx, device="cpu", calibrate=False)
    with pytest.raises(embedkit.InputError, match="holds no documents yet"):
        notes.query("anything")
    for bad, message in [
        ({"documents": ["a", "b"], "ids": ["1"]}, "1 ids, 2 documents"),
        ({"documents": ["  "], "ids": ["1"]}, "document '1' is empty"),
        ({"documents": "one text", "ids": ["1", "2"]}, "2 ids, 1 documents"),
        ({"documents": ["a"], "ids": [1]}, r"ids\[0\] must be a string"),
        ({"documents": ["a"], "ids": ["1"], "metadatas": [{"x": float("nan")}]}, "NaN"),
    ]:
        with pytest.raises(embedkit.InputError, match=message):
            notes.add(**bad)
    assert notes.count() == 0 and not (tmp_path / "idx").exists()
    notes.add(documents=["shock waves"], ids=["a"])
    version = index_files_dir(tmp_path / "idx")
    with pytest.raises(embedkit.InputError, match="id 'a'.*upsert"):
        notes.add(documents=["again"], ids=["a"])
    with pytest.raises(embedkit.InputError, match="no document 'b'"):
        notes.delete(["b"])
    assert index_files_dir(tmp_path / "idx") == version and notes.count() == 1
    with pytest.raises(embedkit.InputError, match="already holds an index"):
        embedkit.create_collection(tmp_path / "idx")
    with pytest.raises(embedkit.InputError, match="not an embedkit index"):
        embedkit.open_collection(tmp_path)
    assert embedkit.open_collection(tmp_path / "idx").query("shock", k=1, mode="lexical")[0]["id"] == "a"


def test_a_write_is_refused_while_another_process_writes(tiny_onnx: Path, tmp_path: Path) -> None:
    notes = embedkit.create_collection(tmp_path / "idx", tiny_onnx, device="cpu", calibrate=False)
    notes.add(documents=["shock waves"], ids=["a"])
    holder = (
        "import sys, time\nfrom embedkit.storage.locking import write_lock\n"
        "with write_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    command = [sys.executable, "-c", holder, str(tmp_path / "idx")]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "held"
        with pytest.raises(embedkit.InputError, match="is being written by"):
            notes.add(documents=["boundary layers"], ids=["b"])
        with pytest.raises(embedkit.InputError, match="is being written by"):
            notes.delete(["a"])
    finally:
        writer.kill()
        writer.wait()
    assert notes.count() == 1
    notes.add(documents=["boundary layers"], ids=["b"])
    assert notes.count() == 2


def test_the_readme_example_runs(tiny_bert: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's collection example, as written, with the tiny model as the bundled one."""
    import embedkit.encode.default_onnx as default_onnx
    import embedkit.encode.model_folder as model_folder

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)  # type: ignore[union-attr]
    assert "create_collection" in code
    monkeypatch.setattr(model_folder, "default_base_model_path", lambda: tiny_bert)
    monkeypatch.setattr(default_onnx, "default_base_model_path", lambda: tiny_bert)
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "2 Rotate the API keys every 30 days." in out
    assert re.search(r"'ids': \['(keys', 'onboarding|onboarding', 'keys)'\]", out)
    assert "'team': 'security', 'year': 2025, 'tags': ['secrets', 'policy']" in out  # merged by upsert
    assert out.splitlines()[0].startswith(("keys 0.", "onboarding 0.")) and "keys " in out
    assert (tmp_path / "notes-index").is_dir()


CHROMA_FILTERS = [
    # (Chroma's dict, the same filter as a predicate over a document's metadata: the reference)
    ({"year": 2003}, lambda m: m.get("year") == 2003),
    ({"year": {"$gte": 2010}}, lambda m: m.get("year", 0) >= 2010),
    ({"year": {"$in": [2001, 2004, 2017]}}, lambda m: m.get("year") in (2001, 2004, 2017)),
    ({"year": {"$nin": [2001, 2004]}}, lambda m: "year" in m and m["year"] not in (2001, 2004)),
    ({"$or": [{"year": {"$lt": 2003}}, {"year": {"$gt": 2016}}]}, lambda m: not 2003 <= m["year"] <= 2016),
    ({"$and": [{"year": {"$gte": 2004}}, {"year": {"$lte": 2008}}]}, lambda m: 2004 <= m["year"] <= 2008),
    ({"year": {"$ne": 2006, "$gt": 2000}}, lambda m: m["year"] not in (2006, 2000) and m["year"] > 2000),
]


@pytest.mark.parametrize("where,passes", CHROMA_FILTERS)
def test_chroma_filters_keep_exactly_the_documents_they_describe(both, where, passes) -> None:
    _, notes = both
    held = {r["_id"]: {"year": r["year"]} for r in FIRST + MORE + REPLACED if r["_id"] != "d5"}
    expected = {doc_id for doc_id, meta in held.items() if passes(meta)}
    found = notes.query("shock wave", k=50, mode="dense", where=where, include=["metadata"])
    assert {h["id"] for h in found} == expected


def test_a_chroma_filter_reads_as_the_expression_it_becomes() -> None:
    from embedkit.index.where_dict import expression_of

    assert expression_of({"lang": 'say "hi"', "ok": True}) == '`lang` = "say \\"hi\\"" and `ok` = true'
    either = expression_of({"$or": [{"a": 1}, {"b": {"$nin": ["x"]}}]})
    assert either == '((`a` = 1) or ((`b` in ["x"]) is not true))'
    for bad, message in [
        ({}, "non-empty dict"),
        ({"a": {"$like": "x"}}, "unknown operator '\\$like'"),
        ({"$not": {"a": 1}}, "unknown operator or field"),
        ({"a": [1]}, "a value is"),
    ]:
        with pytest.raises(embedkit.InputError, match=message):
            expression_of(bad)
