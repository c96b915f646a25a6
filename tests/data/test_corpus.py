"""Corpus reading: every format (plain and gzipped), BEIR folders, counting, subsets, bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest

from embedkit.data.corpus import (
    Document,
    ReadStats,
    corpus_file,
    load_sentences,
    read_documents,
    split_into_sentences,
)
from embedkit.errors import InputError


def write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode("utf-8")
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_txt_lines_are_documents_numbered_from_one(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "c.txt", "first line\n\n   \nsecond line\r\nthird\n", gz)
    stats = ReadStats()
    docs = list(read_documents(path, stats=stats))
    assert [(d.id, d.text) for d in docs] == [("1", "first line"), ("4", "second line"), ("5", "third")]
    assert (stats.read, stats.blank) == (3, 2)


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_ids_titles_and_metadata(tmp_path: Path, gz: bool) -> None:
    lines = [
        {"_id": "d1", "title": "Wing flow", "text": "the flow is high", "year": 1960},
        {"id": 7, "text": "no title here"},
        {"text": "", "title": ""},
        {"text": "plain"},
    ]
    path = write(tmp_path / "c.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n", gz)
    docs = list(read_documents(path))
    assert docs[0] == Document("d1", "the flow is high", "Wing flow", {"year": 1960})
    assert docs[0].full_text == "Wing flow the flow is high"
    assert (docs[1].id, docs[1].full_text) == ("7", "no title here")
    assert (docs[2].id, docs[2].text) == ("4", "plain")  # the blank record (line 3) is skipped
    assert len(docs) == 3


def test_jsonl_column_and_id_column(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", json.dumps({"key": "k1", "body": "hello", "text": "other"}) + "\n")
    (doc,) = read_documents(path, column="body", id_column="key")
    assert (doc.id, doc.text, doc.metadata) == ("k1", "hello", {"text": "other"})


@pytest.mark.parametrize("gz", [False, True])
def test_csv_with_quotes_and_default_text_column(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "c.csv", 'id,text,label\n1,"a, quoted\nmulti-line text",x\n2,plain,y\n', gz)
    docs = list(read_documents(path))
    assert [(d.id, d.text, d.metadata) for d in docs] == [
        ("1", "a, quoted\nmulti-line text", {"label": "x"}),
        ("2", "plain", {"label": "y"}),
    ]


def test_tsv_has_no_quoting_and_uses_column(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", 'sentence1\tsentence2\tscore\n"A" man\tA woman\t3\n')
    (doc,) = read_documents(path, column="sentence1")
    assert doc.text == '"A" man'  # a quote is an ordinary character in TSV
    assert doc.id == "2"  # no id column: the line number
    assert doc.metadata == {"sentence2": "A woman", "score": "3"}


def test_missing_column_names_the_available_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", "title,body\nx,y\n")
    with pytest.raises(InputError, match=r"no column 'text' \(columns: 'title', 'body'\)"):
        list(read_documents(path))
    with pytest.raises(InputError, match="no column 'abstract'"):
        list(read_documents(path, column="abstract"))


def test_row_with_wrong_field_count(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "text\tlabel\nonly one field\n")
    with pytest.raises(InputError, match="line 2 has 1 fields, the header has 2"):
        list(read_documents(path))


@pytest.mark.parametrize("gz", [False, True])
def test_beir_folder_reads_its_corpus(tmp_path: Path, gz: bool) -> None:
    folder = tmp_path / "beir"
    folder.mkdir()
    body = json.dumps({"_id": "a", "title": "T", "text": "body"}) + "\n"
    write(folder / "corpus.jsonl", body, gz)
    (doc,) = read_documents(folder)
    assert (doc.id, doc.full_text) == ("a", "T body")


def test_the_shipped_cranfield_example_reads(tmp_path: Path) -> None:
    corpus = Path(__file__).resolve().parents[2] / "examples" / "cranfield" / "corpus.jsonl.gz"
    docs = list(read_documents(corpus))
    assert len(docs) > 1000 and docs[0].id == "1" and docs[0].title


def test_non_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\nstill fine\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"c\.txt: line 3 is not valid UTF-8"):
        list(read_documents(path))


def test_bad_json_line_and_missing_text_field(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", '{"text": "ok"}\n{"text": broken}\n')
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        list(read_documents(path))
    path = write(tmp_path / "d.jsonl", '{"body": "x"}\n')
    with pytest.raises(InputError, match=r"line 1 has no 'text' field \(keys found: 'body'\)"):
        list(read_documents(path))


@pytest.mark.parametrize(
    ("name", "message"),
    [("missing.txt", "corpus not found"), ("c.parquet", "unknown format '.parquet'")],
)
def test_missing_file_and_unknown_format(tmp_path: Path, name: str, message: str) -> None:
    if name.endswith(".parquet"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(InputError, match=message):
        list(read_documents(tmp_path / name))


def test_folder_without_corpus(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a BEIR folder"):
        list(read_documents(tmp_path))


def test_load_sentences_counts_blank_and_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt", "a b\n\nc  d\na b\n  c d \ne\n")
    sample = load_sentences(path)
    assert sample.sentences == ["a b", "c d", "e"]  # white space collapsed, first occurrence kept
    stats = sample.stats
    assert (stats.read, stats.blank, stats.after_split, stats.duplicates, stats.sampled) == (5, 1, 5, 2, 3)
    expected = hashlib.sha256("".join(s + "\n" for s in sample.sentences).encode()).hexdigest()[:16]
    assert sample.fingerprint == expected


def test_limit_draws_a_reproducible_subset() -> None:
    texts = [f"sentence number {i}" for i in range(100)]
    first = load_sentences(texts, limit=10, seed=3)
    again = load_sentences(texts, limit=10, seed=3)
    other = load_sentences(texts, limit=10, seed=4)
    assert first.sentences == again.sentences and first.fingerprint == again.fingerprint
    assert first.sentences != other.sentences
    # the subset is random.Random(seed).sample over the unique sentences, kept in corpus order
    expected = [texts[i] for i in sorted(random.Random(3).sample(range(100), 10))]
    assert first.sentences == expected
    assert first.stats.sampled == 10
    assert load_sentences(texts, limit=1000).sentences == texts  # a limit above the size keeps all


def test_empty_corpus_and_bad_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt", "\n  \n\n")
    with pytest.raises(InputError, match="no sentences in .*c.txt"):
        load_sentences(path)
    with pytest.raises(InputError, match="--limit must be at least 1"):
        load_sentences(["a"], limit=0)
    with pytest.raises(InputError, match="text 1 is int"):
        load_sentences(["a", 3])  # type: ignore[list-item]


def test_split_sentences_rules() -> None:
    text = "Dr. Smith flew to the U.S. Army base. It was fast! Was it? Yes, e.g. at Mach 2.5 it was."
    assert split_into_sentences(text) == [
        "Dr. Smith flew to the U.S. Army base.",
        "It was fast!",
        "Was it?",
        "Yes, e.g. at Mach 2.5 it was.",
    ]
    # tokenised lower-case text (Cranfield): a stand-alone period ends a sentence
    assert split_into_sentences("the wing stalls . the flow separates .\n\nnew paragraph") == [
        "the wing stalls .",
        "the flow separates .",
        "new paragraph",
    ]


def test_load_sentences_splits_before_removing_duplicates() -> None:
    sample = load_sentences(["One here. Two here.", "Two here. Three here."], split_sentences=True)
    assert sample.sentences == ["One here.", "Two here.", "Three here."]
    assert (sample.stats.read, sample.stats.after_split, sample.stats.duplicates) == (2, 4, 1)


def test_a_fifo_or_pipe_corpus_is_refused_at_once(tmp_path: Path, tiny_bert: Path) -> None:
    """A corpus is read twice (count, then embed): a FIFO's second pass would wait forever."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "corpus.txt"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"corpus .*corpus.txt is a pipe or FIFO, not a file"):
        corpus_file(fifo)  # before anything opens it: opening a FIFO waits for a writer
    code = "import sys; from embedkit.cli.app import main; sys.argv[0] = 'embedkit'; main()"
    args = ["embed", str(fifo), "--out", str(tmp_path / "v.npy"), "--model", str(tiny_bert)]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"error: corpus {fifo} is a pipe or FIFO")
    # the shell's `<(zcat ...)`: a pipe with no file name extension
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(InputError, match="is a pipe or FIFO"):
            corpus_file(f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("name", ["c.csv", "c.tsv"])
def test_a_column_named_twice_is_an_error_naming_it(tmp_path: Path, name: str) -> None:
    sep = "," if name.endswith(".csv") else "\t"
    path = tmp_path / name
    path.write_text(sep.join(["id", "text", "text"]) + "\n" + sep.join(["1", "first", "second"]) + "\n")
    with pytest.raises(InputError, match=rf"{name}: the header names column 'text' twice"):
        list(read_documents(path))


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\n"])
def test_lines_ended_by_cr_alone_are_read_like_any_others(tmp_path: Path, newline: str) -> None:
    path = tmp_path / "c.csv"
    path.write_bytes(newline.join(["id,text", "a,wing flow", 'b,"shock, waves"', ""]).encode())
    docs = list(read_documents(path))
    assert [(d.id, d.text) for d in docs] == [("a", "wing flow"), ("b", "shock, waves")]
    txt = tmp_path / "c.txt"
    txt.write_bytes(newline.join(["one", "two", "three"]).encode())
    assert [(d.id, d.text) for d in read_documents(txt)] == [("1", "one"), ("2", "two"), ("3", "three")]
