"""PDF, HTML and DOCX files as a title and a text, with the `documents` extra's libraries.

Each format is read by the library that owns it, never by a parser of ours:

- PDF: pypdf (pure Python, no compiled parts, bounded against decompression bombs). Title: the
  document's metadata title, else its first heading-like line (a short line with a letter, not
  ending like a sentence). Pages are joined by a blank line.
- HTML (`.html`, `.htm`): Beautiful Soup on lxml's parser. Beautiful Soup decodes the bytes the
  way a browser would (a byte order mark, then the page's declared `<meta charset>`, then
  charset-normalizer's guess), which lxml alone gets wrong for an undeclared UTF-8 page; lxml
  (which python-docx needs anyway) is its fastest tree builder. Title: `<title>`, else the first
  `<h1>`. Text: the page's `<main>` (or `role="main"`, else `<body>`) without scripts, styles
  and navigation, one line per block element.
- DOCX: python-docx. Title: the core properties' title, else the first paragraph styled Title or
  Heading 1. Text: the body's paragraphs and tables in order, a table row a line.

A text that opens with its title does not repeat it. A file a library cannot read (damaged,
encrypted, not the format its name says) is one `InputError` naming it. Bounds, each an
`InputError` naming the file and the limit: `MAX_FILE_BYTES` of file (these formats carry
markup, fonts and images: more than a text file's), `MAX_TEXT_BYTES` of text (a text file's own
limit: one document is tokenized whole), `MAX_PDF_PAGES` pages, `MAX_UNPACKED_BYTES` in a DOCX
unpacked (a DOCX is a zip archive: declared sizes are checked before anything is inflated).
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
from embedkit.errors import InputError

# suffix -> the format's name in messages
FORMATS = {".pdf": "PDF", ".html": "HTML", ".htm": "HTML", ".docx": "DOCX"}
MAX_FILE_BYTES = 64 * 2**20  # a book-length PDF with figures; a DOCX of photographs
MAX_TEXT_BYTES = MAX_DOCUMENT_BYTES  # as a text file: one document is tokenized whole
MAX_PDF_PAGES = 2_000  # pypdf read about 30 text pages a second on 2 busy cores: about a minute
MAX_UNPACKED_BYTES = 256 * 2**20  # a DOCX's parts, inflated: 4x MAX_FILE_BYTES
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


def _too_much_text(path: Path) -> InputError:
    return InputError(
        f"{path} holds over {MAX_TEXT_BYTES // 2**20} MiB of text, the most one document of a folder "
        "corpus may hold, as a text file may: split it into parts"
    )


def _unreadable(path: Path, exc: BaseException) -> InputError:
    kind = FORMATS[path.suffix.lower()]
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return InputError(f"{path} cannot be read as {kind} (damaged, or not {kind}): {reason[:200]}")


@contextmanager
def _library_errors(path: Path) -> Iterator[None]:
    """A parser's failure on a damaged file as one `InputError`. Libraries raise anything from
    ValueError to KeyError on bad bytes, so every Exception is caught here, around their calls."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:  # RecursionError included: a PDF's objects may nest without end
        raise _unreadable(path, exc) from None


# --- PDF ---------------------------------------------------------------------------------------


def _read_pdf(raw: bytes, path: Path) -> tuple[str | None, str]:
    from pypdf import PdfReader

    pages: list[str] = []
    with _pypdf_quiet(), _library_errors(path):
        reader = PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted:
            _decrypt(reader, path)
        if len(reader.pages) > MAX_PDF_PAGES:
            raise InputError(
                f"{path} has {len(reader.pages):,} pages; a PDF of a folder corpus may have at most "
                f"{MAX_PDF_PAGES:,}: split it into parts"
            )
        size = 0
        for page in reader.pages:
            pages.append(page.extract_text() or "")
            size += len(pages[-1].encode("utf-8", "surrogatepass"))
            if size > MAX_TEXT_BYTES:
                raise _too_much_text(path)
        title = reader.metadata.title if reader.metadata is not None else None
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not (isinstance(title, str) and title.strip()):
        title = _heading_like_line(text)
    return title, text


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


# --- HTML --------------------------------------------------------------------------------------

_DROPPED = {"script", "style", "noscript", "template", "nav", "svg", "head", "iframe", "object"}
# elements that start a new line of text (HTML's block-level and table elements)
_BLOCKS = {
    "address", "article", "aside", "blockquote", "dd", "div", "dl", "dt", "figcaption", "figure",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "ol", "p",
    "pre", "section", "table", "tr", "ul", "caption", "details", "summary", "br",
}  # fmt: skip
_CELLS = {"td", "th"}


def _read_html(raw: bytes, path: Path) -> tuple[str | None, str]:
    from bs4 import BeautifulSoup

    with _library_errors(path), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bs4's guesses ("looks like a URL") are not the user's concern
        soup = BeautifulSoup(raw, "lxml")
        # an inline SVG's <title> names a picture, not the page
        tag = next((t for t in soup.find_all("title") if t.find_parent("svg") is None), None)
        title = tag.get_text() if tag is not None else None
        if not (title and title.strip()):
            heading = soup.find("h1")
            title = heading.get_text() if heading is not None else None
        main = soup.find("main") or soup.find(None, {"role": "main"}) or soup.body or soup
        text = _visible_text(main)
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return title, "\n".join(line for line in lines if line)


def _visible_text(root) -> str:
    """The text a browser shows for `root`: white space collapsed as HTML does (kept in <pre>), a
    new line around each block element, a tab after each table cell. A loop over the parsed tree
    (no recursion: a page may nest thousands deep), reading it without changing it."""
    from bs4 import CData, NavigableString, Tag

    parts: list[str] = []
    in_pre = 0
    stack: list = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):  # ("end", tag name): the end of a block, a cell or a <pre>
            in_pre -= node[1] == "pre"
            parts.append("\t" if node[1] in _CELLS else "\n")
        elif isinstance(node, Tag):
            if node.name in _DROPPED:
                continue
            if node.name in _BLOCKS or node.name in _CELLS:
                parts.append("\n" if node.name in _BLOCKS else "")
                stack.append(("end", node.name))
            in_pre += node.name == "pre"
            stack.extend(reversed(node.contents))
        elif type(node) in (NavigableString, CData):  # not a comment or a doctype
            parts.append(str(node) if in_pre else re.sub(r"\s+", " ", node))
    return "".join(parts)


# --- DOCX --------------------------------------------------------------------------------------


def _read_docx(raw: bytes, path: Path) -> tuple[str | None, str]:
    import zipfile

    import docx

    with _library_errors(path):
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > MAX_UNPACKED_BYTES:
            raise InputError(
                f"{path} unpacks to {unpacked / 2**20:,.0f} MiB; a DOCX of a folder corpus may unpack "
                f"to at most {MAX_UNPACKED_BYTES // 2**20} MiB"
            )
        document = docx.Document(io.BytesIO(raw))
        title = document.core_properties.title
        lines, heading = _docx_lines(document)
    return (title if title and title.strip() else heading), "\n".join(lines)


def _docx_lines(document) -> tuple[list[str], str | None]:
    """The body's lines (a paragraph, or a table row with its cells joined by tabs) and the text
    of its first Title or Heading 1 paragraph."""
    from docx.table import Table

    lines: list[str] = []
    heading = None
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                # a merged cell is repeated in each column it spans: once is enough
                cells = [c for i, c in enumerate(cells) if c and (i == 0 or c != cells[i - 1])]
                if cells:
                    lines.append("\t".join(cells))
            continue
        text = " ".join(block.text.split())
        style = block.style.name if block.style is not None else ""
        if heading is None and text and style in ("Title", "Heading 1"):
            heading = text
        if text:
            lines.append(text)
    return lines, heading


_READERS: dict[str, Callable[[bytes, Path], tuple[str | None, str]]] = {
    "PDF": _read_pdf,
    "HTML": _read_html,
    "DOCX": _read_docx,
}
