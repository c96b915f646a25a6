"""A folder corpus is read with bounded work, and text that cannot be encoded is named, never
skipped or guessed (docs/guarantees.md, sections 9 and 10).

References: each text is written in an encoding by Python's own codecs, and read back it must be
exactly that text or a one-line refusal naming the file (never mojibake, never "binary"); each
YAML front matter is either read as `yaml.safe_load` reads it (the reference for a benign one) or
refused within a deadline; every refusal of `embedkit index` is one line and leaves no index.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.corpus import ReadStats, read_documents
from embedkit.data.front_matter import MAX_BYTES, MAX_DEPTH, MAX_VALUES
from embedkit.data.textfolder import MAX_FILE_BYTES
from embedkit.errors import InputError

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

TEXTS = {
    "french": "Le café est très répandu; les élèves étudient à l'école près de la forêt.\n" * 3,
    "german": "Die Münchner Straßenbahn fährt über die Brücke. Größere Wörter, schöne Grüße.\n" * 3,
    "russian": "Привет, как дела? Это тестовый текст на русском языке о крыле самолёта.\n" * 3,
    "greek": "Η πτέρυγα του αεροσκάφους και το οριακό στρώμα της ροής αέρα.\n" * 3,
    "short": "café",
}
ENCODINGS = ["latin-1", "cp1252", "cp1251", "iso8859-7", "utf-16", "utf-32", "utf-8-sig", "utf-8"]


def _index(folder: Path, tmp_path: Path, model: Path) -> tuple[int, list[str]]:
    """`embedkit index FOLDER`: its exit code and output lines; nothing may be written on a refusal."""
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["index", str(folder), "--out", str(out), "--model", str(model)])
    assert result.exit_code == 0 or not out.exists()
    return result.exit_code, result.output.strip().splitlines()


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", list(TEXTS))
def test_text_in_any_encoding_is_read_exactly_or_refused_naming_the_file(tmp_path, name, encoding):
    try:
        raw = TEXTS[name].encode(encoding)
    except UnicodeEncodeError:
        pytest.skip(f"{encoding} cannot write {name}")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "note.txt").write_bytes(raw)
    (folder / "other.txt").write_text("wing flow", encoding="utf-8")
    stats = ReadStats()
    try:
        docs = {d.id: d for d in read_documents(folder, stats=stats)}
    except InputError as exc:
        message = str(exc)
        assert len(message.splitlines()) == 1 and str(folder / "note.txt") in message
        assert "is not UTF-8" in message and "iconv" in message
        assert encoding not in ("utf-8", "utf-8-sig", "utf-16", "utf-32"), message  # those are always read
        return
    assert docs["note.txt"].text == TEXTS[name].replace("\r\n", "\n")  # exactly, never mojibake
    assert stats.binary == 0
    assert bool(stats.recoded) == (encoding not in ("utf-8", "utf-8-sig", "utf-16", "utf-32"))


def test_latin1_is_read_exactly_or_refused_in_one_line_never_skipped(tmp_path, tiny_bert):
    from embedkit.index import SearchIndex

    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in TEXTS.items():
        (folder / f"{name}.txt").write_bytes(text.encode("latin-1", "replace"))
    code, lines = _index(folder, tmp_path, tiny_bert)
    if code == 2:
        assert len(lines) == 1 and " is not UTF-8 " in lines[0], lines
        return
    assert code == 0 and "binary" not in " ".join(lines), lines
    assert any(line.startswith("note: files not in UTF-8 were read in the encoding") for line in lines), lines
    with SearchIndex.load(tmp_path / "idx") as index:
        docs = {d.id: d.text for d in index.get_documents([f"{name}.txt" for name in TEXTS])}
    assert docs == {f"{n}.txt": t.encode("latin-1", "replace").decode("latin-1") for n, t in TEXTS.items()}


@pytest.mark.parametrize(
    "name",
    [b"caf\xe9.txt", b"sub\xff/a.txt", b"\xed\xa0\x80.md", b"ok-\xc3.txt"],
    ids=["latin1", "dir", "cesu", "cut"],
)
def test_file_names_that_are_not_utf8_are_refused_before_any_embedding(tmp_path, tiny_bert, name):
    folder = tmp_path / "notes"
    path = os.path.join(os.fsencode(folder), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"wing flow")
    (folder / "b.txt").write_text("heat transfer", encoding="utf-8")
    code, lines = _index(folder, tmp_path, tiny_bert)
    assert code == 2 and len(lines) == 1, lines
    assert "is not valid UTF-8" in lines[0] and repr(name.split(b"/")[-1])[2:-1] in lines[0], lines


def _laughs(width: int, levels: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines)


def _expanded_values(width: int, levels: int) -> int:
    """Values in `_laughs`' front matter once loaded: the mapping, each key, and each list with its
    items, every level expanded in full (a list of level k holds `width` lists of level k - 1)."""
    lists = [1 + width]  # level 0: the list and its `width` scalars
    for _ in range(1, levels):
        lists.append(1 + width * lists[-1])
    return 1 + levels + sum(lists)


def _count(value) -> int:
    if isinstance(value, dict):
        return 1 + sum(1 + _count(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count(v) for v in value)
    return 1


@pytest.mark.parametrize(("width", "levels"), [(2, 2), (3, 4), (5, 3), (2, 9)])
def test_the_expanded_count_is_what_a_yaml_load_holds(width: int, levels: int) -> None:
    assert _expanded_values(width, levels) == _count(yaml.safe_load(_laughs(width, levels)))


FRONT_MATTERS = {
    "laughs 9x9": (_laughs(9, 9), f"over {MAX_VALUES:,} values"),
    "laughs 30x5": (_laughs(30, 5), f"over {MAX_VALUES:,} values"),
    "laughs 2x40": (_laughs(2, 40), f"over {MAX_VALUES:,} values"),
    "a few aliases": ("base: &b {lang: en}\nposts: [*b, *b]\nyear: 2020", None),
    "merge key": ("base: &b {lang: en, year: 2020}\npost:\n  <<: *b\n  year: 2021", None),
    "deep lists": ("v: " + "[" * (MAX_DEPTH + 10) + "]" * (MAX_DEPTH + 10), f"at most {MAX_DEPTH}"),
    "deep mappings": (
        "".join(f"{'  ' * i}k{i}:\n" for i in range(MAX_DEPTH + 5)) + "  " * (MAX_DEPTH + 5) + "v: 1",
        f"at most {MAX_DEPTH}",
    ),
    "very deep": ("v: " + "[" * 20_000 + "]" * 20_000, f"at most {MAX_DEPTH}"),
    "self alias": ("a: &a [1, *a]", "holds itself"),
    "too long": ("k: " + "x" * MAX_BYTES, f"at most {MAX_BYTES:,}"),
    "many keys": ("\n".join(f"k{i}: {i}" for i in range(2_000)), None),
    "nan": ("v: .nan", "a number JSON does not have"),
    "inf": ("v: -.inf", "a number JSON does not have"),
    "big int": (f"v: {2**64}", "beyond the 64-bit integers"),
    "surrogate": ('v: "a\\ud800"', "not valid UTF-8"),
}


@pytest.mark.parametrize("case", list(FRONT_MATTERS))
def test_front_matter_is_bounded(tmp_path, case):
    yaml_text, refusal = FRONT_MATTERS[case]
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text(f"---\n{yaml_text}\n---\n# Title\nwing flow\n", encoding="utf-8")
    start = time.monotonic()
    try:
        docs = list(read_documents(folder))
    except InputError as exc:
        assert refusal is not None and refusal in str(exc), str(exc)
        assert len(str(exc).splitlines()) == 1 and str(folder / "a.md") in str(exc)
    else:
        assert refusal is None, case
        assert docs[0].metadata == {k: v for k, v in yaml.safe_load(yaml_text).items() if k != "title"}
    assert time.monotonic() - start < 10


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(width=st.integers(2, 40), levels=st.integers(2, 12))
def test_alias_bombs_of_any_shape_are_refused_or_read_fast(tmp_path_factory, width, levels):
    folder = tmp_path_factory.mktemp("laughs")
    (folder / "a.md").write_text(f"---\n{_laughs(width, levels)}\n---\ntext\n", encoding="utf-8")
    expanded = _expanded_values(width, levels)
    start = time.monotonic()
    if expanded > MAX_VALUES:
        with pytest.raises(InputError, match="values"):
            list(read_documents(folder))
    else:
        assert len(list(read_documents(folder))) == 1
    assert time.monotonic() - start < 5


def test_a_file_over_the_limit_is_skipped_before_it_is_read_whole(tmp_path, tiny_bert):
    folder = tmp_path / "notes"
    folder.mkdir()
    with open(folder / "big.txt", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no NUL is read, the size alone skips it
    (folder / "small.txt").write_text("wing flow", encoding="utf-8")
    code, lines = _index(folder, tmp_path, tiny_bert)
    notes = [line for line in lines if line.startswith("note: skipped")]
    assert code == 0 and len(notes) == 1, lines
    assert f"big.txt is over {MAX_FILE_BYTES // 2**20} MiB" in notes[0], lines
    assert any("indexed 1 documents" in line for line in lines), lines


@pytest.mark.parametrize(
    ("file", "line"),
    [
        ("corpus.jsonl", '{"_id": "d2", "title": "", "text": "fl\\ud800ow"}'),
        ("corpus.jsonl", '{"_id": "d\\udcff", "title": "", "text": "flow"}'),
        ("corpus.jsonl", '{"_id": "d2", "title": "\\udfff", "text": "flow"}'),
        ("queries.jsonl", '{"_id": "q2", "text": "wing \\ud800"}'),
    ],
)
def test_a_beir_folder_with_text_that_is_not_unicode_is_refused_as_it_is_read(tmp_path, file, line):
    from embedkit.data.beir import read_beir

    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    lines = {
        "corpus.jsonl": ['{"_id": "d1", "title": "", "text": "wing"}'],
        "queries.jsonl": ['{"_id": "q1", "text": "wing"}'],
    }
    lines[file].append(line)
    for name, rows in lines.items():
        (folder / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"{file}: line 2: the (id|title|text) is not valid UTF-8 text"):
        read_beir(folder)
