"""Each reader of a folder corpus is bounded by the work a file asks of it, not by its bytes: a file
past a bound is skipped with one line naming it and the bound, and the rest of the folder is read
(docs/guarantees.md, section 10).

References: each generated file's units (HTML nodes, DOCX paragraphs and XML elements, PDF drawing
operators and pages, bytes) are known by construction, and drawn either well under a bound (a
quarter: the file must be read) or well over it (twice: it must be skipped), so the expected answer
does not depend on how the code counts its last few units (each shape's file is drawn at 0.05
to 0.25 or 2 to 4 times its bound). The bounds are lowered for the test
where the real ones would take long to reach; the two shapes of the report (a 65 KB DOCX of 3.3
million empty paragraphs, a page of empty elements) are also met at the real bounds.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data import converters, html_text, reader_bounds, textfolder
from embedkit.data.corpus import ReadStats, read_documents
from embedkit.errors import InputError

docx = pytest.importorskip("docx")
fpdf = pytest.importorskip("fpdf")
pypdf = pytest.importorskip("pypdf")
etree = pytest.importorskip("lxml.etree")

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _docx(body_xml: str = "", extra_xml: str = "") -> bytes:
    """python-docx's blank document with `body_xml` at the start of its body and `extra_xml` (a
    comment, say) before its root's end."""
    buffer = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("wing")
    document.save(buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "word/document.xml":
                xml = data.decode()
                start = xml.index("<w:body>") + len("<w:body>")
                xml = xml[:start] + body_xml + xml[start:]
                data = (xml[: xml.rindex("</w:document>")] + extra_xml + "</w:document>").encode()
            archive.writestr(info.filename, data)
    return out.getvalue()


def _docx_elements(raw: bytes) -> int:
    """The elements of every XML part, counted by lxml on its own (the reference)."""
    archive = zipfile.ZipFile(io.BytesIO(raw))
    parts = [i for i in archive.infolist() if i.filename.endswith((".xml", ".rels"))]
    return sum(sum(1 for _ in etree.fromstring(archive.read(i)).iter(etree.Element)) for i in parts)


def _pdf(pages: int = 1, blocks: int = 0, forms: int = 0) -> bytes:
    """A PDF of `pages` pages; its first page also draws `blocks` text blocks (5 operators each)
    and a form XObject `forms` times."""
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject, NumberObject

    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    for _ in range(pages):
        pdf.add_page()
        pdf.cell(text="Wing flow")
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(bytes(pdf.output())))
    page = writer.pages[0]
    resources = page["/Resources"]
    form = DecodedStreamObject()
    form.set_data(b"BT /F1 12 Tf 10 10 Td (x) Tj ET")
    form.update({
        NameObject("/Type"): NameObject("/XObject"), NameObject("/Subtype"): NameObject("/Form"),
        NameObject("/BBox"): ArrayObject([NumberObject(0)] * 4), NameObject("/Resources"): resources,
    })  # fmt: skip
    resources[NameObject("/XObject")] = DictionaryObject({NameObject("/Fm1"): writer._add_object(form)})
    content = DecodedStreamObject()
    drawn = b"BT /F1 12 Tf 10 10 Td (x) Tj ET\n" * blocks + b"/Fm1 Do\n" * forms
    content.set_data(page.get_contents().get_data() + b"\n" + drawn)
    page[NameObject("/Contents")] = writer._add_object(content)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


_ROW = "<w:tr>" + "<w:tc><w:p/></w:tc>" * 10 + "</w:tr>"  # ten cells, a paragraph each

# shape -> (the bound it meets: module, name, lowered value; a file of n units)
SHAPES = {
    "html empty elements": ((html_text, "MAX_HTML_NODES", 400), lambda n: b"<body>" + b"<b></b>" * n),
    "html texts": ((html_text, "MAX_HTML_NODES", 400), lambda n: b"<body>" + b"<p>x</p>" * (n // 2)),
    "html attributes": (
        (html_text, "MAX_HTML_NODES", 400),
        lambda n: b"<body><p " + b" ".join(b"a%d" % i for i in range(n)) + b">x</p>",
    ),
    "html comments": ((html_text, "MAX_HTML_NODES", 400), lambda n: b"<body>" + b"<!-- c -->" * n),
    "docx empty paragraphs": ((converters, "MAX_DOCX_PARAGRAPHS", 200), lambda n: _docx("<w:p/>" * n)),
    "docx table cells": (
        (converters, "MAX_DOCX_PARAGRAPHS", 200),
        lambda n: _docx(
            "<w:tbl>" + ("<w:tr>" + "<w:tc><w:p/></w:tc>" * 10 + "</w:tr>") * (n // 10) + "</w:tbl>"
        ),
    ),
    "docx runs": (
        (converters, "MAX_DOCX_ELEMENTS", None),
        lambda n: _docx("<w:p>" + "<w:r/>" * n + "</w:p>"),
    ),
    "docx inflated xml": (
        (converters, "MAX_DOCX_XML_BYTES", None),
        lambda n: _docx(extra_xml="<!--" + "z" * n + "-->"),
    ),
    "pdf operators": ((converters, "MAX_PDF_OPERATORS", 600), lambda n: _pdf(blocks=n // 5)),
    "pdf forms drawn": ((converters, "MAX_PDF_OPERATORS", 600), lambda n: _pdf(forms=n // 105)),
    "pdf pages": ((converters, "MAX_PDF_PAGES", 8), lambda n: _pdf(pages=n)),
    "text bytes": ((textfolder, "MAX_FILE_BYTES", 4000), lambda n: b"wing flow " * (n // 10)),
}
SUFFIX = {"html": ".html", "docx": ".docx", "pdf": ".pdf", "text": ".txt"}
BOUND_WORDS = {
    "MAX_HTML_NODES": "HTML nodes",
    "MAX_DOCX_PARAGRAPHS": "DOCX paragraphs",
    "MAX_DOCX_ELEMENTS": "DOCX XML elements",
    "MAX_DOCX_XML_BYTES": "its XML parts to",
    "MAX_PDF_OPERATORS": "PDF drawing operators",
    "MAX_PDF_PAGES": "pages; a PDF of a folder corpus may have at most",
    "MAX_FILE_BYTES": "MiB, the most one text file",
}


def _bound(shape: str) -> tuple[object, str, int]:
    (module, name, value), _ = SHAPES[shape]
    if value is None:  # over the blank document's own XML (the reference counts it)
        blank = _docx()
        value = _docx_elements(blank) + 400 if name == "MAX_DOCX_ELEMENTS" else _xml_bytes(blank) + 40_000
    return module, name, value


def _xml_bytes(raw: bytes) -> int:
    archive = zipfile.ZipFile(io.BytesIO(raw))
    return sum(i.file_size for i in archive.infolist() if i.filename.endswith((".xml", ".rels")))


def _units(shape: str, bound: int, scale: float) -> int:
    """The units of a file `scale` times what the bound allows (the blank DOCX's own XML aside)."""
    _, name, _ = SHAPES[shape][0]
    if name in ("MAX_DOCX_ELEMENTS", "MAX_DOCX_XML_BYTES"):  # the blank document holds most of it
        return max(int((400 if name == "MAX_DOCX_ELEMENTS" else 40_000) * scale), 1)
    return max(int(bound * scale), 1)


def _read(folder: Path) -> tuple[list[str], list[str]]:
    stats = ReadStats()
    return [d.id for d in read_documents(folder, stats=stats)], stats.skipped


@pytest.mark.parametrize("shape", sorted(SHAPES))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scale=st.one_of(st.floats(0.05, 0.25), st.floats(2.0, 4.0)))
def test_a_file_past_a_bound_of_its_reader_is_skipped_and_the_rest_read(tmp_path_factory, shape, scale):
    over = scale > 1
    module, name, bound = _bound(shape)
    folder = tmp_path_factory.mktemp("docs")
    (folder / "ok.md").write_text("# Fine\nwing flow\n", encoding="utf-8")
    (folder / "zz.txt").write_text("shock wave\n", encoding="utf-8")
    file = folder / f"big{SUFFIX[shape.split()[0]]}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, name, bound)
        file.write_bytes(SHAPES[shape][1](_units(shape, bound, scale)))
        ids, skipped = _read(folder)
    if over:
        assert ids == ["ok.md", "zz.txt"], (shape, ids)
        (reason,) = skipped
        assert reason.startswith(str(file)) and BOUND_WORDS[name] in reason and "\n" not in reason, reason
    else:
        assert ids == ["big" + file.suffix, "ok.md", "zz.txt"] and not skipped, (shape, skipped)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("page.html", b"<body>" + b"<p>x</p>" * 1500),
        ("report.docx", _docx("<w:p><w:r><w:t>x</w:t></w:r></w:p>" * 600)),
        ("book.pdf", _pdf(blocks=500)),
    ],
)
def test_the_clock_bounds_what_the_counts_do_not_foresee(tmp_path, monkeypatch, name, raw):
    monkeypatch.setattr(reader_bounds, "MAX_READ_SECONDS", 0.0)  # every look at the clock is too late
    (tmp_path / "ok.md").write_text("# Fine\n", encoding="utf-8")
    (tmp_path / name).write_bytes(raw)
    ids, skipped = _read(tmp_path)
    assert ids == ["ok.md"] and len(skipped) == 1, skipped
    assert re.match(rf"{re.escape(str(tmp_path / name))} took over 0 s to read", skipped[0]), skipped


def test_the_reported_shapes_are_skipped_at_the_real_bounds(tmp_path):
    (tmp_path / "ok.md").write_text("# Fine\n", encoding="utf-8")
    paragraphs = _docx("<w:p/>" * 3_300_000)  # the reported 65 KB file
    assert len(paragraphs) < 100_000
    (tmp_path / "bomb.docx").write_bytes(paragraphs)
    (tmp_path / "tags.html").write_bytes(b"<body>" + b"<b></b>" * (html_text.MAX_HTML_NODES + 1))
    ids, skipped = _read(tmp_path)
    assert ids == ["ok.md"]
    assert [line.split(" holds over ")[0] for line in skipped] == [
        str(tmp_path / "bomb.docx"),
        str(tmp_path / "tags.html"),
    ]


def test_index_skips_the_file_in_one_line_and_indexes_the_rest(tmp_path, tiny_bert):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.md").write_text("# Fine\nwing flow\n", encoding="utf-8")
    (folder / "bomb.docx").write_bytes(_docx("<w:p/>" * (converters.MAX_DOCX_PARAGRAPHS + 10)))
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["index", str(folder), "--out", str(out), "--model", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: skipped")]
    assert notes == [
        f"note: skipped {folder / 'bomb.docx'} holds over {converters.MAX_DOCX_PARAGRAPHS:,} DOCX paragraphs "
        "(a table cell's included), the most a reader of a folder corpus reads in one file: "
        "split it into parts"
    ]
    assert "indexed 1 documents (1 files past a reader's bounds skipped)" in result.stdout


@pytest.mark.parametrize(
    ("body", "title"),
    [  # the title read from a heading's first TITLE_CHARS; each heading read only until one has text
        ("# " + "[" * 240_000 + "\n\nwing\n", "[" * 1000),
        ("# ![](x)\n" * 2_000 + "## Lift\n", "Lift"),
        ("## a\n" * 20_000 + "# Flow\n", "Flow"),
    ],
)
def test_a_markdown_title_is_read_from_a_bounded_part(tmp_path, body, title):
    (tmp_path / "a.md").write_text(body, encoding="utf-8")
    (document,) = read_documents(tmp_path)
    assert document.title == title


def test_a_single_file_past_a_bound_is_one_line_with_its_reason(tmp_path):
    (tmp_path / "bomb.docx").write_bytes(_docx("<w:p/>" * (converters.MAX_DOCX_PARAGRAPHS + 10)))
    with pytest.raises(InputError, match=r"bomb\.docx holds over 150,000 DOCX paragraphs") as caught:
        list(read_documents(tmp_path / "bomb.docx"))
    assert "\n" not in str(caught.value)
