"""Corpora as people have them: a folder of .txt/.md files, and .txt line files appended one after another.

References: hand-built expectations (ids, titles, texts, metadata written out by hand), and an
index rebuilt in one go from the same lines.
"""

from __future__ import annotations

import json

import pytest
from runtime_helpers import TableEncoder

from embedkit.data.corpus import ReadStats, read_documents
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.fixture
def notes(tmp_path):
    root = tmp_path / "notes"
    write(root / "a.txt", "plain text\nsecond line\n")
    write(root / "guides" / "setup.md", "# Setting up\n\nInstall it.\n\n## Details\nMore.\n")
    write(root / "guides" / "deep" / "no-heading.md", "Just words, `# not a heading`.\n")
    write(
        root / "posts" / "2021.md",
        "---\ntitle: A post\nyear: 2021\ntags: [x, y]\n---\n# Heading kept\nBody text.\n",
    )
    write(root / "late-heading.md", "intro line\n\n```\n# inside a fence\n```\n# Real heading\nend\n")
    write(root / ".hidden.md", "# secret\n")
    write(root / ".git" / "config.txt", "not a note\n")
    write(root / "image.txt", b"\x89PNG\x00\x00binary")
    write(root / "data.csv", "text\nignored\n")
    return root


def test_a_folder_of_text_files_is_one_document_a_file(notes):
    stats = ReadStats()
    docs = {d.id: d for d in read_documents(notes, stats=stats)}
    assert list(docs) == sorted(docs)  # relative paths, in order
    assert set(docs) == {
        "a.txt",
        "guides/setup.md",
        "guides/deep/no-heading.md",
        "posts/2021.md",
        "late-heading.md",
    }
    assert (docs["a.txt"].title, docs["a.txt"].text) == ("a", "plain text\nsecond line\n")
    assert (docs["guides/setup.md"].title, docs["guides/setup.md"].text) == (
        "Setting up",
        "Install it.\n\n## Details\nMore.\n",
    )
    assert docs["guides/deep/no-heading.md"].title == "no-heading"
    post = docs["posts/2021.md"]
    assert (post.title, post.text, post.metadata) == (
        "A post",
        "# Heading kept\nBody text.\n",
        {"year": 2021, "tags": ["x", "y"]},
    )
    late = docs["late-heading.md"]
    assert late.title == "Real heading" and late.text.startswith("intro line")  # not the fenced one
    assert (stats.read, stats.hidden, stats.binary) == (5, 2, 1)  # .hidden.md and .git; the PNG


def test_folder_errors_are_one_line(tmp_path):
    write(tmp_path / "empty" / ".keep.txt", "x")
    no_files = r"holds no \.txt, \.md, \.pdf, \.html or \.docx files \(1 hidden left out\).*BEIR"
    with pytest.raises(InputError, match=no_files):
        list(read_documents(tmp_path / "empty"))
    write(tmp_path / "bad" / "x.md", "---\nyear: [2021\n---\ntext\n")
    with pytest.raises(InputError, match=r"x\.md: the front matter is not valid YAML"):
        list(read_documents(tmp_path / "bad"))
    with pytest.raises(InputError, match="has no columns"):
        list(read_documents(tmp_path / "bad", column="body"))


def test_a_beir_folder_is_still_read_as_one(tmp_path):
    write(tmp_path / "beir" / "corpus.jsonl", json.dumps({"_id": "7", "title": "t", "text": "x"}) + "\n")
    write(tmp_path / "beir" / "notes.txt", "not a document")
    assert [d.id for d in read_documents(tmp_path / "beir")] == ["7"]


def test_a_folder_indexes_and_its_front_matter_is_metadata(notes, tmp_path, tiny_bert):
    from embedkit import SearchIndex, build_index

    docs = list(read_documents(notes))
    encoder = TableEncoder(tiny_bert, {d.full_text: [float(i + 1), 1.0] for i, d in enumerate(docs)})
    report = build_index(notes, tmp_path / "idx", encoder, IndexOptions(lexical=False))
    assert (report.added, report.hidden_files, report.binary_files) == (5, 2, 1)
    with SearchIndex.load(tmp_path / "idx") as index:
        (post,) = index.get_documents(["posts/2021.md"])
    assert post.metadata == {"year": 2021, "tags": ["x", "y"]}


def test_txt_files_appended_number_their_lines_on(tmp_path, tiny_bert):
    from embedkit import SearchIndex, build_index

    first = write(tmp_path / "a.txt", "alpha\n\nbeta\n")  # line 2 is blank: skipped, its number too
    second = write(tmp_path / "b.txt", "gamma\ndelta\n")
    both = write(tmp_path / "ab.txt", "alpha\n\nbeta\ngamma\ndelta\n")
    texts = ["alpha", "beta", "gamma", "delta"]
    encoder = TableEncoder(tiny_bert, {t: [float(i + 1), 1.0] for i, t in enumerate(texts)})
    build_index(first, tmp_path / "grown", encoder)
    report = build_index(second, tmp_path / "grown", encoder, IndexOptions(append=True))
    assert report.count == 4
    build_index(both, tmp_path / "rebuilt", encoder)
    with SearchIndex.load(tmp_path / "grown") as grown, SearchIndex.load(tmp_path / "rebuilt") as rebuilt:
        ids = ["1", "3", "4", "5"]  # as one file of the lines one after the other
        assert (
            [d.text for d in grown.get_documents(ids)]
            == [d.text for d in rebuilt.get_documents(ids)]
            == texts
        )
    # ids that are not numbers leave the count where it was; numbers after them go on from the largest
    jsonl = write(tmp_path / "c.jsonl", json.dumps({"id": "note-9", "text": "alpha"}) + "\n")
    build_index(jsonl, tmp_path / "grown", encoder, IndexOptions(append=True))
    build_index(second, tmp_path / "grown", encoder, IndexOptions(append=True))
    with SearchIndex.load(tmp_path / "grown") as grown:
        assert [d.text for d in grown.get_documents(["6", "7", "note-9"])] == ["gamma", "delta", "alpha"]


def test_a_fifo_among_the_files_is_one_line_not_a_hang(tmp_path):
    import os

    from runtime_helpers import invoke_with_deadline

    write(tmp_path / "docs" / "a.txt", "a document")
    os.mkfifo(tmp_path / "docs" / "b.txt")  # a writer would have to open it: a plain read waits forever
    code, stderr = invoke_with_deadline(["index", str(tmp_path / "docs"), "--out", str(tmp_path / "idx")], 60)
    assert code == 2 and "b.txt" in stderr and "FIFO" in stderr.upper() and len(stderr.splitlines()) == 1
    assert not (tmp_path / "idx").exists()
