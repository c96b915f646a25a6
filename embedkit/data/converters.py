"""PDF, HTML and DOCX files as a title and a text, with the `documents` extra's libraries.

Each format is read by the library that owns it, never by a parser of ours:

- PDF: pypdf (pure Python, no compiled parts, bounded against decompression bombs). Title: the
  document's metadata title, else its first heading-like line (a short line with a letter, not
  ending like a sentence). Pages are joined by a blank line.
- HTML (`.html`, `.htm`): `embedkit.data.html_text`, Beautiful Soup on lxml's parser (lxml,
  which python-docx needs anyway, is its fastest tree builder), the bytes decoded as the HTML
  standard says. Title: `<title>`, else the first `<h1>`. Text: the page's `<main>` (or
  `role="main"`, else `<body>`) without scripts, styles and navigation, one line per block element.
- DOCX: python-docx. Title: the core properties' title, else the first paragraph styled Title or
  Heading 1. Text: the body's paragraphs and tables in order, a table row a line.

A text that opens with its title does not repeat it. A file a library cannot read (damaged,
encrypted, not the format its name says) is one `InputError` naming it. Bounds, each a
`BeyondBounds` naming the file and the limit (`embedkit.data.reader_bounds`: the folder skips the
file): `MAX_FILE_BYTES` of file (these formats carry markup, fonts and images: more than a text
file's), `MAX_TEXT_BYTES` of text (a text file's own limit: one document is tokenized whole);
for a PDF, `MAX_PDF_PAGES` pages and `MAX_PDF_OPERATORS` drawing operators (counted as pypdf runs
them); for a DOCX (a zip archive), `MAX_UNPACKED_BYTES` unpacked and `MAX_DOCX_XML_BYTES` of XML
(declared sizes, checked before anything is inflated), `MAX_DOCX_ELEMENTS` XML elements and
`MAX_DOCX_PARAGRAPHS` paragraphs (counted as lxml inflates them, before python-docx builds
anything); for HTML, `embedkit.data.html_text`.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from embedkit.data.document import MAX_DOCUMENT_BYTES
from embedkit.data.html_text import read_html
from embedkit.data.reader_bounds import BeyondBounds, WorkBudget, library_errors
from embedkit.errors import InputError

# suffix -> the format's name in messages
FORMATS = {".pdf": "PDF", ".html": "HTML", ".htm": "HTML", ".docx": "DOCX"}
MAX_FILE_BYTES = 64 * 2**20  # a book-length PDF with figures; a DOCX of photographs
MAX_TEXT_BYTES = MAX_DOCUMENT_BYTES  # as a text file: one document is tokenized whole
MAX_PDF_PAGES = 2_000  # pypdf read about 30 text pages a second on 2 busy cores: about a minute
MAX_UNPACKED_BYTES = 256 * 2**20  # a DOCX's parts, inflated: 4x MAX_FILE_BYTES
# a DOCX's XML parts, inflated: a 1,000-page report's document.xml is some 20 MiB; 65 KB of zip can
# inflate to 20 MiB of empty paragraphs
MAX_DOCX_XML_BYTES = 64 * 2**20
# elements of a DOCX's XML parts (a paragraph of text is some 5 to 10), and paragraphs: python-docx
# spends about 110 us on each paragraph's text (an XPath), measured here on 2 busy cores (16,000 empty
# paragraphs in 2.0 s), so about 16 s at the bound; a 1,000-page report holds some 30,000
MAX_DOCX_ELEMENTS = 1_000_000
MAX_DOCX_PARAGRAPHS = 150_000
_W_P = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}p"  # a paragraph (or a cell's)
# pypdf's content operators over all pages, a form XObject counted as `_FORM_WEIGHT` each time it is
# drawn: about 20 us an operator and 2 ms a form measured here (pypdf 7.1 on 2 busy cores), so about
# 20 s at the bound; a 2,000-page book of text runs some 500 operators a page
MAX_PDF_OPERATORS = 1_000_000
_FORM_WEIGHT = 100
_SPLIT_PDF = "split it first (qpdf --split-pages=500 big.pdf part-%d.pdf)"
_HEADING_LINE = 120  # characters: longer lines are prose, not a PDF's title line


@dataclass(frozen=True)
class Converted:
    title: str | None  # None: the file has none; the caller takes the file name
    text: str


def convert(raw: bytes, path: Path) -> Converted:
    """The title and text of a PDF, HTML or DOCX file's bytes (`path`'s suffix says which)."""
    reader = _READERS[FORMATS[path.suffix.lower()]]
    title, text = reader(raw, path)
    title = " ".join(title.split()) if title else None
    text = _without_title(text.strip(), title)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_TEXT_BYTES:
        raise _too_much_text(path)
    return Converted(title or None, text)


def _without_title(text: str, title: str | None) -> str:
    if title and text.startswith(title) and text[len(title) : len(title) + 1] in ("", "\n"):
        return text[len(title) :].lstrip()
    return text


def _too_much_text(path: Path) -> BeyondBounds:
    return BeyondBounds(
        f"{path} holds over {MAX_TEXT_BYTES // 2**20} MiB of text, the most one document of a folder "
        "corpus may hold, as a text file may: split it into parts"
    )


# --- PDF ---------------------------------------------------------------------------------------


def _read_pdf(raw: bytes, path: Path) -> tuple[str | None, str]:
    from pypdf import PdfReader

    pages: list[str] = []
    with _pypdf_quiet(), library_errors(path, "PDF"):
        reader = PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted:
            _decrypt(reader, path)
        _check_pages(reader, path)
        operators = "PDF drawing operators (a form counted each time it is drawn)"
        budget = WorkBudget(path, MAX_PDF_OPERATORS, operators, _SPLIT_PDF)

        def count(operator: bytes, *_: object) -> None:  # pypdf calls it before each operator it runs
            budget.spend(_FORM_WEIGHT if operator == b"Do" else 1)

        size = 0
        for page in reader.pages:
            pages.append(page.extract_text(visitor_operand_before=count) or "")
            budget.check_clock()  # a page's fonts and streams are read before its first operator
            size += len(pages[-1].encode("utf-8", "surrogatepass"))
            if size > MAX_TEXT_BYTES:
                raise _too_much_text(path)
        title = reader.metadata.title if reader.metadata is not None else None
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not (isinstance(title, str) and title.strip()):
        title = _heading_like_line(text)
    return title, text


def _check_pages(reader, path: Path) -> None:
    """A `BeyondBounds` past `MAX_PDF_PAGES`: the page count the file declares first (read before
    its page tree is walked), then the pages the walk finds."""
    declared = reader.root_object["/Pages"].get("/Count", 0)
    pages = int(declared) if isinstance(declared, int) and declared > MAX_PDF_PAGES else len(reader.pages)
    if pages > MAX_PDF_PAGES:
        raise BeyondBounds(
            f"{path} has {pages:,} pages; a PDF of a folder corpus may have at most {MAX_PDF_PAGES:,}: "
            f"{_SPLIT_PDF}"
        )


def _decrypt(reader, path: Path) -> None:
    """Open a PDF encrypted without a user password (many are: printing or copying restricted)."""
    from pypdf.errors import DependencyError

    try:
        opened = reader.decrypt("")
    except DependencyError:  # AES: pypdf decrypts it with the cryptography package
        raise InputError(
            f"{path} is an encrypted PDF (AES): reading it needs the cryptography package "
            "(pip install cryptography)"
        ) from None
    if not opened:
        raise InputError(f"{path} is an encrypted PDF that needs a password: decrypt it first")


@contextmanager
def _pypdf_quiet() -> Iterator[None]:
    """pypdf logs what it repairs in a damaged file ("incorrect startxref pointer") and warns; the
    file is read all the same, so those lines stay off the terminal."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _heading_like_line(text: str) -> str | None:
    """The first line of `text` that reads as a heading: short, with a letter, not ending in
    sentence punctuation. A PDF has no headings, only lines of text."""
    for line in text.split("\n")[:40]:
        line = line.strip()
        if (
            line
            and len(line) <= _HEADING_LINE
            and re.search(r"[^\W\d_]", line)
            and not line.endswith((".", ",", ";", ":"))
        ):
            return line
    return None


# --- DOCX --------------------------------------------------------------------------------------


def _read_docx(raw: bytes, path: Path) -> tuple[str | None, str]:
    import docx

    with library_errors(path, "DOCX"):
        _check_docx_parts(raw, path)
        document = docx.Document(io.BytesIO(raw))
        title = document.core_properties.title
        lines, heading = _docx_lines(document, path)
    return (title if title and title.strip() else heading), "\n".join(lines)


def _check_docx_parts(raw: bytes, path: Path) -> None:
    """A `BeyondBounds` when the archive unpacks past `MAX_UNPACKED_BYTES`, its XML parts past
    `MAX_DOCX_XML_BYTES` (both on the sizes it declares, before anything is inflated: zipfile
    never inflates past them), or its XML parts hold over `MAX_DOCX_ELEMENTS` elements (counted
    by lxml as they are inflated, no tree built, stopping at the bound), or over
    `MAX_DOCX_PARAGRAPHS` paragraphs."""
    import zipfile

    from lxml import etree

    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        parts = archive.infolist()
        xml = [info for info in parts if info.filename.endswith((".xml", ".rels"))]
        for total, limit, what in (
            (sum(info.file_size for info in parts), MAX_UNPACKED_BYTES, ""),
            (sum(info.file_size for info in xml), MAX_DOCX_XML_BYTES, "its XML parts "),
        ):
            if total > limit:
                raise BeyondBounds(
                    f"{path} unpacks {what}to {total / 2**20:,.0f} MiB; a DOCX of a folder corpus may "
                    f"unpack {what}to at most {limit // 2**20} MiB"
                )
        counter = _ElementCounter(
            WorkBudget(path, MAX_DOCX_ELEMENTS, "DOCX XML elements"),
            WorkBudget(path, MAX_DOCX_PARAGRAPHS, "DOCX paragraphs (a table cell's included)"),
        )
        for info in xml:
            parser = etree.XMLParser(target=counter, resolve_entities=False, no_network=True)
            with archive.open(info) as part:
                while chunk := part.read(2**20):
                    parser.feed(chunk)
            parser.close()


class _ElementCounter:
    """An lxml parser target that counts elements and paragraphs, and builds nothing."""

    def __init__(self, elements: WorkBudget, paragraphs: WorkBudget) -> None:
        self.elements = elements
        self.paragraphs = paragraphs

    def start(self, tag: str, attrib: dict) -> None:
        self.elements.spend()
        if tag == _W_P:
            self.paragraphs.spend()

    def close(self) -> None:
        return None


def _docx_lines(document, path: Path) -> tuple[list[str], str | None]:
    """The body's lines (a paragraph, or a table row with its cells joined by tabs) and the text
    of its first Title or Heading 1 paragraph."""
    from docx.enum.style import WD_STYLE_TYPE
    from docx.table import Table

    # style ids to names, once: python-docx's `paragraph.style` looks a paragraph's style up among
    # all styles (about 2 ms a paragraph), which made a DOCX of many paragraphs read for hours
    names = {style.style_id: style.name for style in document.styles}
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    headings = {i for i, name in names.items() if name in ("Title", "Heading 1")}
    default_is_heading = default is not None and default.style_id in headings
    clock = WorkBudget(path, MAX_DOCX_ELEMENTS, "DOCX paragraphs and table cells")
    lines: list[str] = []
    heading = None
    for block in document.iter_inner_content():
        clock.spend()
        if isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                clock.spend(len(cells))
                # a merged cell is repeated in each column it spans: once is enough
                cells = [c for i, c in enumerate(cells) if c and (i == 0 or c != cells[i - 1])]
                if cells:
                    lines.append("\t".join(cells))
            continue
        text = " ".join(block.text.split())
        style = block._p.style  # the paragraph's style id (python-docx's oxml), None: the default
        if heading is None and text and (style in headings if style else default_is_heading):
            heading = text
        if text:
            lines.append(text)
    return lines, heading


_READERS: dict[str, Callable[[bytes, Path], tuple[str | None, str]]] = {
    "PDF": _read_pdf,
    "HTML": read_html,
    "DOCX": _read_docx,
}
