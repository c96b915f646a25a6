"""A folder of documents as a corpus: every text, Markdown, PDF, HTML and DOCX file under it is one
document.

The most common corpus there is (notes, docs, a wiki export, a shared drive). Files are found
recursively and read in the order of their relative paths, so the same folder always gives the
same documents:

- id: the file's path relative to the folder, with `/` (`guides/setup.md`);
- title: for Markdown (`.md`, `.markdown`), the front matter's `title`, else the title its headings
  give (`embedkit.data.markdown_title`); for PDF, HTML (`.html`, `.htm`) and DOCX, the title the
  file states (`embedkit.data.converters`); for `.txt`, and wherever none is found, the file name
  without its extension. A title that opens the file is not repeated in the text;
- text: the rest of the file (a PDF's, HTML page's or DOCX's text, converted by the `documents`
  extra's libraries: a folder holding such a file without them is one `InputError` naming the
  extra, before anything is read);
- metadata: a Markdown file's YAML front matter (`embedkit.data.front_matter`), so
  `search --where 'year >= 2020'` can filter on it; other files have none.

A single Markdown, PDF, HTML or DOCX file given as the corpus is a corpus of one document, read
as the same file in a folder would be (its id is its name); a single `.txt` file stays a corpus of
one document per line (`embedkit.data.corpus`).

Hidden files and folders (a name starting with `.`: `.git`, `.obsidian`; and Office's lock files,
`~$name.docx`) and binary text files (a NUL byte, without a UTF-16 or UTF-32 byte order mark) are
skipped and counted in `ReadStats`; files with other extensions are not corpus files and are
passed over.

A file past a bound of its reader is skipped, its reason (one line naming the file and the bound)
kept in `ReadStats.skipped`, and the rest of the folder read (`embedkit.data.reader_bounds`): a text
file over `MAX_FILE_BYTES` (it would be one document, tokenized whole: split it, or give it as a
`.txt` corpus, one document per line), a PDF, HTML or DOCX file beyond the bounds of
`embedkit.data.converters` and `embedkit.data.html_text`. A single document file given as the
corpus has no rest: past a bound, that reason is its one-line `InputError`.

Everything else a file could make wrong is refused before the first document is embedded, in
one `InputError` naming the file:
- a name that is not valid UTF-8 (an id must be text that every store and client can write);
- a PDF, HTML or DOCX file its library cannot read (damaged, encrypted);
- text that is not UTF-8 whose encoding cannot be told for sure: charset-normalizer (a well-kept
  detector, the one `requests` uses) proposes encodings; the file is read with them only where
  every best-scored one reads the same text (Cyrillic in cp1251, say), and counted in
  `ReadStats.recoded`. Latin-1 and its neighbours (cp1250, cp1252) read accented letters
  differently, so such a file is refused with the conversion that fixes it, never guessed;
- a front matter that is not valid YAML, or beyond its bounds (`embedkit.data.front_matter`).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from pathlib import Path

from embedkit.data import converters
from embedkit.data.document import MAX_DOCUMENT_BYTES, Document, ReadStats
from embedkit.data.front_matter import split_front_matter
from embedkit.data.input_files import check_input_file, read_input_bytes
from embedkit.data.markdown_title import markdown_title
from embedkit.data.reader_bounds import BeyondBounds
from embedkit.data.values import check_document, lone_surrogate
from embedkit.errors import InputError

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_MARKDOWN = (".md", ".markdown")
FOLDER_SUFFIXES = (*TEXT_SUFFIXES, *converters.FORMATS)  # every file a folder corpus reads
DOCUMENT_SUFFIXES = (*_MARKDOWN, *converters.FORMATS)  # a file of these alone: a corpus of one document
_SNIFF = 8192  # bytes looked at for a NUL, as git and grep decide that a file is binary
MAX_FILE_BYTES = MAX_DOCUMENT_BYTES  # a text file's bytes are its text
_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def is_text_folder(path: Path) -> bool:
    """Whether `path` is a folder to read file by file (a folder that is not a BEIR folder)."""
    from embedkit.data.textfiles import find_data_file

    return path.is_dir() and find_data_file(path, "corpus.jsonl") is None


def is_document_file(path: Path) -> bool:
    """Whether `path` is one Markdown, PDF, HTML or DOCX file: a corpus of one document."""
    return path.is_file() and path.name.lower().endswith(DOCUMENT_SUFFIXES)


def is_documents(path: Path) -> bool:
    """Whether `path` is read file by file: a folder of documents, or one document file."""
    return is_text_folder(path) or is_document_file(path)


def check_folder(folder: Path) -> None:
    """The checks of `folder_documents` that need no file read: it holds corpus files (or is one,
    `is_document_file`), each a regular file, and the libraries they need are installed. A build
    makes them before it opens its model, so that such input is one line at once, not after a
    model load."""
    stats = ReadStats()
    root, files = _root_and_files(folder, stats)
    for relative in files:
        check_input_file(root / relative)


def _root_and_files(path: Path, stats: ReadStats) -> tuple[Path, list[str]]:
    """The folder the ids are relative to, and the corpus files under it: a folder's files, or a
    single document file alone (its id its name)."""
    if is_document_file(path):
        _check_converters(path.parent, [path.name])
        return path.parent, [path.name]
    return path, _listed_files(path, stats)


def folder_documents(folder: Path, stats: ReadStats) -> Iterator[Document]:
    """The documents of the files under `folder`, or of the single document file `folder` (see the
    module docstring)."""
    one_file = is_document_file(folder)
    folder, files = _root_and_files(folder, stats)
    for relative in files:
        try:
            document = _read_file(folder, relative, stats)
        except BeyondBounds as exc:  # a large file is not an error: the rest of the folder is read
            if one_file:  # there is no rest: the reason is the answer
                raise
            stats.skipped.append(str(exc))
            continue
        if document is None:
            stats.binary += 1
        else:
            document.metadata = check_document(
                document.id, document.title, document.text, document.metadata, str(folder / relative)
            )
            yield document


def _listed_files(folder: Path, stats: ReadStats) -> list[str]:
    """The corpus files under `folder`, sorted; an `InputError` when there are none, or when some need
    the `documents` extra and it is not installed."""
    files = sorted(_corpus_files(folder, stats))
    if not files:
        hidden = f" ({stats.hidden} hidden left out)" if stats.hidden else ""
        raise InputError(
            f"{folder} holds no .txt, .md, .pdf, .html or .docx files{hidden}, and no corpus.jsonl (it is "
            "not a BEIR folder either): give a folder of documents, a BEIR folder or a corpus file"
        )
    _check_converters(folder, files)
    return files


def _corpus_files(folder: Path, stats: ReadStats) -> Iterator[str]:
    """Relative paths (with `/`) of the corpus files under `folder`; hidden entries counted, not entered."""
    for root, dirs, names in os.walk(folder):
        hidden_dirs = [d for d in dirs if d.startswith(".")]
        stats.hidden += len(hidden_dirs)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith((".", "~$")):  # ~$: the lock file Office keeps beside an open document
                stats.hidden += 1
            elif name.lower().endswith(FOLDER_SUFFIXES):
                relative = Path(root, name).relative_to(folder).as_posix()
                if lone_surrogate(relative) is not None:  # os.walk keeps undecodable bytes as surrogates
                    raise InputError(
                        f"{folder}: the file name {os.fsencode(relative)!r} is not valid UTF-8, and a "
                        "document's id is its name: rename it (convmv -f latin1 -t utf-8 --notest -r)"
                    )
                yield relative


def _check_converters(folder: Path, files: list[str]) -> None:
    """An `InputError` naming the `documents` extra when a PDF, HTML or DOCX file is among `files`
    and its libraries are not installed (looked for, not imported)."""
    from embedkit.extras import require_extra

    converted = [f for f in files if f.lower().endswith(tuple(converters.FORMATS))]
    if converted:
        more = f" and {len(converted) - 1:,} more files" if len(converted) > 1 else ""
        require_extra("documents", f"reading {folder / converted[0]}{more}")


def _read_file(folder: Path, relative: str, stats: ReadStats) -> Document | None:
    """One file as a document; None for a binary text file (a NUL byte without a wide byte order mark)."""
    path = folder / relative
    name = Path(relative).name
    stem = name[: name.rfind(".")] if "." in name else name
    if name.lower().endswith(tuple(converters.FORMATS)):
        raw = _read_bounded(path, converters.MAX_FILE_BYTES, converters.FORMATS[path.suffix.lower()])
        converted = converters.convert(raw, path)
        return Document(relative, converted.text, converted.title or stem)
    raw = _read_bounded(path, MAX_FILE_BYTES, "text")
    if b"\0" in raw[:_SNIFF] and not raw.startswith(_WIDE_BOMS):
        return None
    text = _decode(raw, path, stats).replace("\r\n", "\n")
    if not relative.lower().endswith(_MARKDOWN):
        return Document(relative, text, stem)
    metadata, body = split_front_matter(text, path)
    title = metadata.pop("title", None)
    if not isinstance(title, str) or not title.strip():
        heading, body = markdown_title(body)
        title = heading or stem
    return Document(relative, body, title.strip(), metadata)


def _read_bounded(path: Path, limit: int, kind: str) -> bytes:
    """The bytes of `path`, or a `BeyondBounds` when it holds over `limit` (read no further)."""
    raw = read_input_bytes(path, limit=limit + 1)  # a FIFO or device named x.txt: one line
    if len(raw) > limit:
        also = ", or index it alone as a .txt corpus (one document per line)" if kind == "text" else ""
        raise BeyondBounds(
            f"{path} is over {limit // 2**20} MiB, the most one {kind} file of a folder corpus may be "
            f"(it is one document): split it{also}"
        )
    return raw


def _decode(raw: bytes, path: Path, stats: ReadStats) -> str:
    """The text of a file: UTF-8 (a BOM of UTF-8, 16 or 32 bits honoured), else the encoding that
    charset-normalizer can tell for sure (see the module docstring), else an `InputError`."""
    for bom, codec in (
        (codecs.BOM_UTF8, "utf-8"),
        *((b, "utf-32" if len(b) == 4 else "utf-16") for b in _WIDE_BOMS),
    ):
        if raw.startswith(bom):
            try:
                return raw.decode(codec).removeprefix("\ufeff")
            except UnicodeDecodeError:
                break
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    from charset_normalizer import from_bytes

    matches = list(from_bytes(raw))
    best = [m for m in matches if (m.chaos, m.coherence) == (matches[0].chaos, matches[0].coherence)]
    if best and len({str(m) for m in best}) == 1:
        stats.recoded.append(f"{path} ({best[0].encoding})")
        return str(best[0])
    read_as = ", ".join(m.encoding for m in best) or "no encoding"
    raise InputError(
        f"{path} is not UTF-8 (byte {first_bad + 1}: {raw[first_bad : first_bad + 1]!r}) and its encoding "
        f"cannot be told for sure ({read_as} read it differently): convert it, e.g. iconv -f latin1 -t utf-8"
    )
