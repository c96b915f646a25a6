"""A folder of documents as people keep them (Markdown, text, HTML, PDF, DOCX) gets the titles a
person would write down, and its text without scripts, menus or a repeated title.

References: every expected title below is written out by hand from the file it belongs to; the
PDFs and DOCX files are written by fpdf2 and python-docx, the HTML by hand. `embedkit index` and
`embedkit search --json` over the same folder must show the same titles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.corpus import ReadStats, read_documents

fpdf = pytest.importorskip("fpdf")
docx = pytest.importorskip("docx")

FENCE = "```"

MARKDOWN = {
    # a shell comment in a fenced block comes before the Setext level-1 title
    "cachetools.md": (
        "[![badge](https://x/b.svg)](https://x)\n\n"
        f"{FENCE}python\n# speed up calculating Fibonacci numbers with dynamic programming\n"
        f"@cached(cache={{}})\ndef fib(n): ...\n{FENCE}\n\n"
        "cachetools\n==========\n\nThis module provides various memoizing collections.\n",
        "cachetools",
    ),
    # section headings before the level-1 title further down
    "sponsors-first.md": (
        "## Sponsors\n\nThanks to all.\n\n## Features\n\n- fast\n\n# Tidy Records\n\nText.\n",
        "Tidy Records",
    ),
    # a four-backtick fence holds a three-backtick line: the inner one does not close it
    "nested-fence.md": (
        "````markdown\n```\n````\n\n# Real Title After Fences\n",
        "Real Title After Fences",
    ),
    "nested-fence-2.md": (
        "````\n```\n# comment inside the outer fence\n```\n````\n\n## Usage\n",
        "Usage",
    ),
    # a tilde fence holds a backtick line
    "tilde.md": ("~~~\n```\n# not a heading\n~~~\n\nSetup Guide\n===\n", "Setup Guide"),
    # an indented code block and an HTML block hold `#` lines
    "indented.md": (
        "Run this:\n\n    # configure the build\n    make\n\n<div>\n# inside html\n</div>\n\n## Building\n",
        "Building",
    ),
    # a code block inside a list item
    "list-code.md": (
        "1. Install:\n\n   ```sh\n   # install the tool\n   pip install it\n   ```\n\n"
        "### Steps\n\n## Overview\n",
        "Overview",
    ),
    # no level 1: the first heading of the highest level present
    "only-low.md": ("### Details first\n\n## Install\n\n## Use\n\n### More\n", "Install"),
    # a heading in a quote is not the file's
    "quoted.md": ("> # Quoted Heading\n\n## The Real Section\n", "The Real Section"),
    # inline markup is dropped, entities decoded
    "markup.md": ("# **embedkit** &amp; [friends](https://x) `v1` ##\n\nBody.\n", "embedkit & friends v1"),
    "front-matter.md": (
        "---\ntitle: From The Front Matter\nyear: 2021\n---\n# A heading\n",
        "From The Front Matter",
    ),
    "front-no-title.md": ("---\nyear: 2021\n---\nIntro\n\n# Heading Title\n", "Heading Title"),
    "no-heading.md": ("Just words, `# not a heading`, and #hashtag.\n", "no-heading"),
    "setext-2.md": ("Subtitle Only\n-------------\n\ntext\n", "Subtitle Only"),
}

HTML = {
    "page.html": (
        "<!doctype html><html><head><title> Rotating  the Keys </title>"
        "<style>body{color:red}</style><script>var secret = 1;</script></head>"
        "<body><nav>Home | About | Login</nav><main><h1>Key rotation</h1>"
        "<p>Rotate the <b>signing</b> keys\n   every month.</p><ul><li>first</li><li>second</li></ul>"
        "</main><footer>Copyright</footer></body></html>",
        "Rotating the Keys",
    ),
    "no-title.htm": (
        "<html><body><svg><title>an icon</title></svg><h1>The <em>Wing</em> Report</h1>"
        "<p>Lift and drag.</p></body></html>",
        "The Wing Report",
    ),
}


def _pdf(path: Path, lines: list[str], title: str | None = None, pages: int = 1) -> Path:
    pdf = fpdf.FPDF()
    if title is not None:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for page in range(pages):
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line if page == 0 else f"{line} (page {page + 1})")
            pdf.ln(8)
    pdf.output(str(path))
    return path


def _docx(path: Path, blocks: list[tuple[str, str]], title: str = "") -> Path:
    document = docx.Document()
    document.core_properties.title = title
    for style, text in blocks:
        if style == "table":
            table = document.add_table(rows=1, cols=2)
            table.cell(0, 0).text, table.cell(0, 1).text = text.split("|")
        elif style.startswith("h"):
            document.add_heading(text, level=int(style[1:]))
        else:
            document.add_paragraph(text)
    document.save(str(path))
    return path


@pytest.fixture
def documents(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder of every kind of file, and each file's hand-written title."""
    root = tmp_path / "docs"
    (root / "html").mkdir(parents=True)
    expected = {}
    for name, (content, title) in MARKDOWN.items():
        (root / name).write_text(content, encoding="utf-8")
        expected[name] = title
    for name, (content, title) in HTML.items():
        (root / "html" / name).write_text(content, encoding="utf-8")
        expected[f"html/{name}"] = title
    # declared Latin-1: Beautiful Soup reads the <meta charset> before guessing
    (root / "html" / "latin.html").write_bytes(
        '<html><head><meta charset="iso-8859-1"></head><body><h1>Café Menu</h1><p>crème brûlée</p>'
        "</body></html>".encode("latin-1")
    )
    expected["html/latin.html"] = "Café Menu"
    (root / "notes.txt").write_text("# a text file has no headings\nplain words\n", encoding="utf-8")
    expected["notes.txt"] = "notes"
    _pdf(
        root / "titled.pdf",
        ["Boundary layers on swept wings", "The flow separates early."],
        "Wing Flow Report",
    )
    expected["titled.pdf"] = "Wing Flow Report"
    _pdf(root / "untitled.pdf", ["12", "Heat Transfer in Nozzles", "Heat moves to the wall."], pages=2)
    expected["untitled.pdf"] = "Heat Transfer in Nozzles"
    _docx(root / "core.docx", [("p", "intro"), ("h1", "A Heading")], title="The Core Title")
    expected["core.docx"] = "The Core Title"
    _docx(
        root / "heading.docx",
        [("p", "A first paragraph."), ("h2", "Overview"), ("h1", "Cooling Towers"), ("table", "flow|rate")],
    )
    expected["heading.docx"] = "Cooling Towers"
    _docx(root / "plain.docx", [("p", "Only a paragraph, no heading.")])
    expected["plain.docx"] = "plain"
    (root / "~$heading.docx").write_bytes(b"\x0bJane Doe  ")  # Word's lock file beside an open document
    return root, expected


def test_each_file_gets_its_hand_written_title(documents):
    root, expected = documents
    stats = ReadStats()
    titles = {d.id: d.title for d in read_documents(root, stats=stats)}
    assert titles == expected
    assert stats.hidden == 1  # the lock file


def test_texts_leave_out_scripts_menus_code_titles_and_keep_the_body(documents):
    root, _ = documents
    docs = {d.id: d for d in read_documents(root)}
    page = docs["html/page.html"].text
    assert page.splitlines() == ["Key rotation", "Rotate the signing keys every month.", "first", "second"]
    assert docs["html/no-title.htm"].text == "Lift and drag."  # the <h1> is the title: not repeated
    assert docs["html/latin.html"].text == "crème brûlée"
    assert docs["titled.pdf"].text.splitlines() == [
        "Boundary layers on swept wings",
        "The flow separates early.",
    ]
    untitled = docs["untitled.pdf"].text
    assert "Heat moves to the wall. (page 2)" in untitled and untitled.startswith("12")
    assert docs["heading.docx"].text.splitlines() == [
        "A first paragraph.", "Overview", "Cooling Towers", "flow\trate",
    ]  # fmt: skip
    assert docs["plain.docx"].text == "Only a paragraph, no heading."
    # a Markdown heading that opens the file is its title, not also its first line
    assert docs["markup.md"].text == "Body.\n"
    assert docs["sponsors-first.md"].text.startswith("## Sponsors")  # a title further down stays
    assert docs["front-matter.md"].metadata == {"year": 2021}
    assert (
        docs["titled.pdf"].metadata == docs["html/page.html"].metadata == docs["heading.docx"].metadata == {}
    )


def test_index_and_search_show_the_titles(documents, tmp_path: Path, tiny_bert: Path):
    root, expected = documents
    out = tmp_path / "idx"
    runner = CliRunner()
    built = runner.invoke(
        app, ["index", str(root), "--out", str(out), "--model", str(tiny_bert), "--no-calibrate"]
    )
    assert built.exit_code == 0, built.output
    found = runner.invoke(app, ["search", str(out), "heat transfer", "--json", "-k", str(len(expected))])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.stdout)["hits"]
    assert {hit["id"]: hit["title"] for hit in hits} == expected


def test_a_single_document_file_is_a_corpus_of_one(documents, tmp_path, tiny_bert):
    """Each Markdown, PDF, HTML and DOCX file given alone reads as it does in its folder (its id its
    name); a single .txt file stays one document a line."""
    root, _ = documents
    in_folder = {d.id: d for d in read_documents(root)}
    singles = [name for name in in_folder if not name.endswith(".txt")]
    assert {Path(name).suffix for name in singles} >= {".md", ".pdf", ".html", ".docx"}
    for name in singles:
        alone = list(read_documents(root / name))
        folder_doc = in_folder[name]
        assert [(d.id, d.title, d.text, d.metadata) for d in alone] == [
            (Path(name).name, folder_doc.title, folder_doc.text, folder_doc.metadata)
        ]
    assert [d.text for d in read_documents(root / "notes.txt")] == [
        "# a text file has no headings",
        "plain words",
    ]
    out = tmp_path / "one-idx"
    result = CliRunner().invoke(
        app,
        ["index", str(root / "titled.pdf"), "--out", str(out), "--model", str(tiny_bert), "--no-calibrate"],
    )
    assert result.exit_code == 0, result.output
    assert "indexed 1 documents" in result.output
    other = tmp_path / "other-idx"
    result = CliRunner().invoke(app, ["index", str(root / "core.docx"), "--out", str(other), "--column", "x"])
    assert result.exit_code == 2 and "a document file has no columns" in result.output
