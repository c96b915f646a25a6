"""PDF, HTML and DOCX files in a folder corpus are read with bounded work, and a file that cannot
be read is one line naming it (docs/guarantees.md, section 10).

References: each limit is lowered to a size the test can reach (or, for the file size, met with a
sparse file), and a file one step over it must be skipped with one line naming the file and the
limit (the rest of the folder read), one at it read; a damaged file is refused: every refusal of
`embedkit index` is one line, exit 2, and leaves no index.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data import converters
from embedkit.data.corpus import ReadStats, read_documents
from embedkit.errors import InputError

fpdf = pytest.importorskip("fpdf")
docx = pytest.importorskip("docx")
pypdf = pytest.importorskip("pypdf")


def _pdf_bytes(pages: int = 1, text: str = "Wing flow over a swept wing.") -> bytes:
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=12)
    for _ in range(pages):
        pdf.add_page()
        pdf.cell(text=text)
    return bytes(pdf.output())


def _docx_bytes(paragraphs: list[str]) -> bytes:
    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _folder(tmp_path: Path, name: str, raw: bytes) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    (folder / "ok.md").write_text("# Fine\n", encoding="utf-8")
    (folder / name).write_bytes(raw)
    return folder


def _refused(folder: Path, match: str) -> str:
    with pytest.raises(InputError, match=match) as caught:
        list(read_documents(folder))
    assert "\n" not in str(caught.value)
    return str(caught.value)


def _skipped(folder: Path, match: str) -> str:
    """Read `folder`: only ok.md is a document, and one file is skipped with a line matching `match`."""
    stats = ReadStats()
    assert [d.id for d in read_documents(folder, stats=stats)] == ["ok.md"]
    (reason,) = stats.skipped
    assert re.search(match, reason) and "\n" not in reason, reason
    return reason


def _encrypted_pdf(user_password: str = "secret") -> bytes:
    writer = pypdf.PdfWriter(clone_from=io.BytesIO(_pdf_bytes()))
    # RC4: pypdf needs no crypto library; an owner password alone restricts printing and copying
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def test_a_pdf_encrypted_without_a_user_password_is_read(tmp_path):
    folder = _folder(tmp_path, "restricted.pdf", _encrypted_pdf(user_password=""))
    docs = {d.id: d for d in read_documents(folder)}
    assert (docs["restricted.pdf"].title, docs["restricted.pdf"].text) == (
        "restricted",  # its one line ends like a sentence: no heading
        "Wing flow over a swept wing.",
    )


DAMAGED = {
    "garbage.pdf": (lambda: b"%PDF-1.7\n" + bytes(range(256)) * 8, r"garbage\.pdf cannot be read as PDF"),
    "not-a-zip.docx": (
        lambda: b"PK\x03\x04 this is no zip archive",
        r"not-a-zip\.docx cannot be read as DOCX",
    ),
    "zip-not-docx.docx": (
        lambda: _zip_of({"hello.txt": b"hi"}),
        r"zip-not-docx\.docx cannot be read as DOCX",
    ),
    "locked.pdf": (_encrypted_pdf, r"locked\.pdf is an encrypted PDF that needs a password"),
}


def _zip_of(members: dict[str, bytes]) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("name", list(DAMAGED))
def test_a_file_its_library_cannot_read_is_one_line_naming_it(name, tmp_path):
    make, match = DAMAGED[name]
    _refused(_folder(tmp_path, name, make()), match)


def test_a_damaged_pdf_stops_the_index_in_one_line(tmp_path, tiny_bert):
    folder = _folder(tmp_path, "report.pdf", _pdf_bytes()[:200])  # cut off after its header
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["index", str(folder), "--out", str(out), "--model", str(tiny_bert)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "report.pdf cannot be read as PDF" in lines[0] and not out.exists()


def test_pages_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(converters, "MAX_PDF_PAGES", 3)
    folder = _folder(tmp_path, "book.pdf", _pdf_bytes(pages=3))
    assert len(list(read_documents(folder))) == 2
    (folder / "book.pdf").write_bytes(_pdf_bytes(pages=4))
    _skipped(folder, r"book\.pdf has 4 pages; a PDF of a folder corpus may have at most 3")


@pytest.mark.parametrize("kind", ["pdf", "docx", "html"])
def test_converted_text_is_bounded_as_a_text_file_is(kind, tmp_path, monkeypatch):
    words = ("lift " * 40).strip()  # 199 bytes of text
    raw = {
        "pdf": lambda: _pdf_bytes(text=words),
        "docx": lambda: _docx_bytes([words]),
        "html": lambda: f"<p>\n {words} </p>".encode(),
    }[kind]()
    folder = _folder(tmp_path, f"long.{kind}", raw)
    monkeypatch.setattr(converters, "MAX_TEXT_BYTES", len(words) - 1)
    _skipped(folder, rf"long\.{kind} holds over 0 MiB of text, the most one document")
    monkeypatch.setattr(converters, "MAX_TEXT_BYTES", len(words))
    assert len(list(read_documents(folder))) == 2


def test_a_docx_that_unpacks_too_large_is_skipped_before_it_is_inflated(tmp_path, monkeypatch):
    raw = _docx_bytes(["a short document"])
    import zipfile

    unpacked = sum(i.file_size for i in zipfile.ZipFile(io.BytesIO(raw)).infolist())
    folder = _folder(tmp_path, "bomb.docx", raw)
    monkeypatch.setattr(converters, "MAX_UNPACKED_BYTES", unpacked - 1)
    _skipped(folder, r"bomb\.docx unpacks to .* MiB; a DOCX of a folder corpus may unpack to at most")
    monkeypatch.setattr(converters, "MAX_UNPACKED_BYTES", unpacked)
    assert len(list(read_documents(folder))) == 2


def test_a_converted_file_over_its_size_limit_is_skipped_unread(tmp_path):
    folder = _folder(tmp_path, "huge.pdf", b"")
    with open(folder / "huge.pdf", "wb") as f:
        f.truncate(converters.MAX_FILE_BYTES + 1)  # sparse
    message = _skipped(folder, r"huge\.pdf is over 64 MiB, the most one PDF file of a folder corpus may be")
    assert "split it" in message
