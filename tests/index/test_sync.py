"""`embedkit index --sync`: only the changed and the new documents embedded, the removed deleted.

References: the texts an encoder was handed (a counting encoder: exactly the edited and the new
documents' texts, nothing else), the documents a fresh build of the final corpus holds (ids,
texts, its corpus fingerprint), an exact numpy search over the final corpus, and the version
folders on disk (a sync that changed nothing writes none; a kill at each publish step leaves the
old version live, and the next sync finishes the job).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_helpers import TableEncoder, brute_force
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.index import docstore_records
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage.versioned import current_dir

pytest.importorskip("faiss")

DIM = 16
TOPICS = ["shock wave", "boundary layer", "heat transfer", "wing stall", "jet noise", "buckling shell"]


class CountingEncoder(TableEncoder):
    """Vectors fixed by each text's hash; remembers every text it was asked to embed."""

    def __init__(self, model_dir: Path) -> None:
        super().__init__(model_dir, {}, dim=DIM)
        self.texts: list[str] = []

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        self.texts += list(texts)
        return super().encode(texts, batch_size, normalize)


def _folder(root: Path, n: int = 13) -> dict[str, str]:
    """`n` Markdown notes, one topic each; returns relative path -> body."""
    root.mkdir(parents=True, exist_ok=True)
    notes = {f"note{i:02d}.md": f"{TOPICS[i % 6]} measured in run {i}, wind tunnel {i * 7}" for i in range(n)}
    for name, body in notes.items():
        (root / name).write_text(f"# Note {name[4:6]}\n\n{body}\n", encoding="utf-8")
    return notes


def _options(**changes) -> IndexOptions:
    return IndexOptions(calibrate=False, **changes)  # a calibration embeds pseudo queries: no counting


def _versions(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("v-"))


def _edit_remove_add(folder: Path) -> tuple[str, str]:
    """One edit, one removal, one new file; returns the full texts the sync must embed."""
    (folder / "note03.md").write_text("# Note 03\n\nsupersonic inlet unstart observed\n", encoding="utf-8")
    (folder / "note07.md").unlink()
    (folder / "sub").mkdir()
    (folder / "sub" / "new.md").write_text("# Fresh\n\nhypersonic glide vehicle heating\n", encoding="utf-8")
    return "Note 03 supersonic inlet unstart observed", "Fresh hypersonic glide vehicle heating"


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_sync_embeds_the_edit_and_the_new_file_and_deletes_the_removed(
    tmp_path: Path, tiny_bert: Path, kind: str
) -> None:
    folder, out = tmp_path / "docs", tmp_path / "idx"
    _folder(folder)
    encoder = CountingEncoder(tiny_bert)
    build_index(folder, out, encoder, _options(kind=kind))
    assert len(encoder.texts) == 13
    expected_texts = _edit_remove_add(folder)
    encoder.texts.clear()
    report = build_index(folder, out, encoder, _options(sync=True))
    assert sorted(encoder.texts) == sorted(expected_texts)  # the edit and the new file, nothing else
    assert (report.added, report.kept, report.deleted, report.count) == (2, 11, 1, 13)
    fresh = tmp_path / "fresh"
    build_index(folder, fresh, CountingEncoder(tiny_bert), _options(kind=kind))
    with SearchIndex.load(out) as index, SearchIndex.load(fresh) as rebuilt:
        ids = [f"note{i:02d}.md" for i in range(13)] + ["sub/new.md"]
        assert index.get_documents(ids) == rebuilt.get_documents(ids)  # note07 gone, note03 edited
        assert index.get_documents(["note07.md"]) == [None]
        assert index.meta["corpus_fingerprint"] == rebuilt.meta["corpus_fingerprint"]
        assert index.meta["sources"][-1] | {"corpus": ""} == {
            "corpus": "", "added": 2, "replaced": 1, "kept": 11, "deleted": 1,
        }  # fmt: skip
        hits = index.search_text(["supersonic inlet unstart"], k=3, mode="lexical")[0]
        assert hits[0].id == "note03.md"
        assert all(h.id != "note07.md" for h in index.search_text(["tunnel 49"], k=20, mode="lexical")[0])
        # dense: an exact search over the final corpus's vectors
        held = [d for d in rebuilt.get_documents(ids) if d is not None]
        vectors = encoder.encode([d.full_text for d in held])
        queries = [expected_texts[0], "heat transfer measured"]
        _, order = brute_force(vectors, encoder.encode(queries), 5)
        found = index.search_text(queries, k=5, encoder=encoder, mode="dense")
        assert [[h.id for h in row] for row in found] == [[held[i].id for i in row] for row in order]


@pytest.mark.parametrize("settings", [{"passages": "16:4"}, {"kind": "flat", "quantize": "int8"}])
def test_sync_of_an_index_of_passages_or_of_codes(tmp_path: Path, tiny_bert: Path, settings: dict) -> None:
    """The same changes in an index of passages (each document's every passage) and a quantized one
    (its float vectors kept beside the codes): the documents of a fresh build, searched alike."""
    folder, out, fresh = tmp_path / "docs", tmp_path / "idx", tmp_path / "fresh"
    _folder(folder)
    build_index(folder, out, tiny_bert, _options(device="cpu", **settings))
    _edit_remove_add(folder)
    report = build_index(folder, out, tiny_bert, _options(sync=True, device="cpu"))
    assert (report.added, report.kept, report.deleted) == (2, 11, 1)
    build_index(folder, fresh, tiny_bert, _options(device="cpu", **settings))
    queries = ["supersonic inlet unstart", "heat transfer measured in run 2"]
    with SearchIndex.load(out) as index, SearchIndex.load(fresh) as rebuilt:
        assert len(index.rows) == len(rebuilt.rows) and index.document_count == rebuilt.document_count == 13
        for mode in ("dense", "lexical"):
            found = index.search_text(queries, k=5, mode=mode)
            expected = rebuilt.search_text(queries, k=5, mode=mode)
            assert [[h.id for h in hits] for hits in found] == [[h.id for h in hits] for hits in expected]


def test_a_sync_that_finds_nothing_changed_writes_no_version(tmp_path: Path, tiny_bert: Path) -> None:
    folder, out = tmp_path / "docs", tmp_path / "idx"
    _folder(folder)
    encoder = CountingEncoder(tiny_bert)
    first = build_index(folder, out, encoder, _options(sync=True))  # no index there: a new one
    assert (first.added, first.kept, first.deleted, first.written) == (13, 0, 0, True)
    before, encoder.texts = _versions(out), []
    again = build_index(folder, out, encoder, _options(sync=True))
    assert (again.added, again.kept, again.deleted, again.count, again.written) == (0, 13, 0, 13, False)
    assert encoder.texts == [] and _versions(out) == before
    (folder / "note05.md").unlink()  # a removal alone is a change
    gone = build_index(folder, out, encoder, _options(sync=True))
    assert (gone.added, gone.kept, gone.deleted, gone.count) == (0, 12, 1, 12) and encoder.texts == []


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("layout", ["c.jsonl", "beir/corpus.jsonl"])
def test_sync_of_a_jsonl_or_beir_corpus_goes_by_id_and_sees_metadata_changes(
    tmp_path: Path, tiny_bert: Path, layout: str
) -> None:
    records = [{"_id": f"d{i}", "text": f"{TOPICS[i % 6]} record {i}", "year": 2000 + i} for i in range(8)]
    (tmp_path / layout).parent.mkdir(exist_ok=True)
    file, out = _jsonl(tmp_path / layout, records), tmp_path / "idx"
    corpus = file.parent if layout.startswith("beir") else file  # a BEIR folder: its corpus.jsonl
    encoder = CountingEncoder(tiny_bert)
    build_index(corpus, out, encoder, _options())
    changed = [dict(r) for r in records if r["_id"] != "d2"]  # d2 removed
    changed[0] = {"year": 2000, "text": records[0]["text"], "_id": "d0"}  # fields reordered: no change
    changed[1]["year"] = 1999  # d1: metadata changed, text the same
    changed.append({"_id": "d9", "text": "a new record"})
    encoder.texts = []
    _jsonl(file, changed)
    report = build_index(corpus, out, encoder, _options(sync=True))
    assert sorted(encoder.texts) == sorted([records[1]["text"], "a new record"])
    assert (report.added, report.kept, report.deleted) == (2, 6, 1)
    with SearchIndex.load(out) as index:
        assert [d.metadata.get("year") if d else None for d in index.get_documents(["d1", "d2", "d9"])] == [
            1999,
            None,
            None,
        ]
        assert len(index.rows) == 8
    dup = _jsonl(tmp_path / "dup.jsonl", [*changed, {"_id": "d3", "text": records[3]["text"]}])
    with pytest.raises(InputError, match="duplicate document id 'd3'"):
        build_index(dup, out, encoder, _options(sync=True))
    with pytest.raises(InputError, match="drop --append"):
        build_index(corpus, out, encoder, _options(sync=True, append=True))


def test_an_index_built_before_content_hashes_syncs_without_embedding_again(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store without the `content_hash` column (as earlier versions wrote it): kept documents
    are recognised by the hash of their stored fields."""
    folder, out = tmp_path / "docs", tmp_path / "idx"
    _folder(folder)
    encoder = CountingEncoder(tiny_bert)
    records = docstore_records.document_records
    with monkeypatch.context() as patch:
        schema = docstore_records.SCHEMA.replace(",\n    content_hash TEXT", "")
        patch.setattr(docstore_records, "SCHEMA", schema)
        patch.setattr(docstore_records, "INSERT", "INSERT INTO documents VALUES (?, ?, ?, ?, ?)")
        five_columns = lambda first, docs: [r[:5] for r in records(first, docs)]  # noqa: E731
        patch.setattr(docstore_records, "document_records", five_columns)
        build_index(folder, out, encoder, _options())
    with sqlite3.connect(current_dir(out) / "docs.sqlite") as db:
        assert "content_hash" not in {row[1] for row in db.execute("PRAGMA table_info(documents)")}
    expected_texts = _edit_remove_add(folder)
    encoder.texts = []
    report = build_index(folder, out, encoder, _options(sync=True))
    assert sorted(encoder.texts) == sorted(expected_texts)
    assert (report.added, report.kept, report.deleted) == (2, 11, 1)


@pytest.mark.parametrize(
    ("step", "new_is_live"),
    [("version-staged", False), ("version-renamed", False), ("version-switched", True)],
)
def test_a_kill_during_a_sync_leaves_the_old_version_and_the_next_sync_finishes(
    tmp_path: Path, tiny_bert: Path, step: str, new_is_live: bool
) -> None:
    folder, out = tmp_path / "docs", tmp_path / "idx"
    notes = _folder(folder)
    build_index(folder, out, tiny_bert, _options(device="cpu"))
    _edit_remove_add(folder)
    options = "IndexOptions(sync=True, calibrate=False, device='cpu')"
    code = (
        "from embedkit import build_index; from embedkit.jobs.index_options import IndexOptions; "
        f"build_index({str(folder)!r}, {str(out)!r}, options={options})"
    )
    env = {**os.environ, "EMBEDKIT_FAULT_AT": step}
    process = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert process.returncode == -9, process.stderr
    with SearchIndex.load(out) as index:
        texts = {
            d.id: d.text.strip() for d in index.get_documents(["note03.md", "note07.md", "sub/new.md"]) if d
        }
        if new_is_live:
            assert set(texts) == {"note03.md", "sub/new.md"}
        else:  # the old version, searchable: the removed note there, the edit not yet
            assert texts == {"note03.md": notes["note03.md"], "note07.md": notes["note07.md"]}
            hits = index.search_text([notes["note07.md"]], k=1, mode="lexical")[0]
            assert hits[0].id == "note07.md"
    report = build_index(folder, out, tiny_bert, _options(sync=True, device="cpu"))
    assert (report.added, report.deleted) == ((0, 0) if new_is_live else (2, 1))
    assert not [p for p in out.iterdir() if p.name.startswith(".staging-")]
    with SearchIndex.load(out) as index:
        assert len(index.rows) == 13 and index.get_documents(["note07.md"]) == [None]
        assert index.get_documents(["note03.md"])[0].text.strip() == "supersonic inlet unstart observed"


def test_cli_sync_summary(tmp_path: Path, tiny_bert: Path) -> None:
    folder, out = tmp_path / "docs", tmp_path / "idx"
    _folder(folder)
    runner = CliRunner()
    args = ["index", str(folder), "--out", str(out), "--no-calibrate", "--sync"]
    result = runner.invoke(app, [*args, "--model", str(tiny_bert), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "embedded 13, kept 0, deleted 0" in result.output
    _edit_remove_add(folder)
    result = runner.invoke(app, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "embedded 2, kept 11, deleted 1" in result.output and "now holds 13" in result.output
    result = runner.invoke(app, [*args, "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "embedded 0, kept 13, deleted 0" in result.output and "nothing changed" in result.output
    result = runner.invoke(app, [*args, "--append"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "error: --sync keeps the index in --out in step with the corpus: drop --append and --overwrite"
    ]


def test_collection_sync(tmp_path: Path, tiny_bert: Path) -> None:
    import embedkit

    folder = tmp_path / "docs"
    _folder(folder, 4)
    encoder = CountingEncoder(tiny_bert)
    notes = embedkit.create_collection(tmp_path / "col", encoder, calibrate=False)
    assert notes.sync(folder).added == 4
    (folder / "note01.md").unlink()
    encoder.texts = []
    report = notes.sync(folder)
    assert (report.added, report.kept, report.deleted, len(notes)) == (0, 3, 1, 3) and encoder.texts == []
    assert notes.get(["note01.md"])["ids"] == []  # Chroma's GetResult: an id not held is left out
