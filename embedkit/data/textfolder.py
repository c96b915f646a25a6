"""A folder of text files as a corpus: every `.txt` and `.md` file under it is one document.

The most common corpus there is (notes, docs, a wiki export). Files are found recursively and read
in the order of their relative paths, so the same folder always gives the same documents:

- id: the file's path relative to the folder, with `/` (`guides/setup.md`);
- title: for Markdown, the front matter's `title`, else the first heading (`# Setup`); otherwise,
  and for `.txt`, the file name without its extension. A heading that opens the file is the
  title and is not repeated in the text;
- text: the rest of the file;
- metadata: a Markdown file's YAML front matter (`---` lines around `key: value` lines, as Jekyll,
  Hugo and Obsidian write it), so `search --where 'year >= 2020'` can filter on it.

Hidden files and folders (a name starting with `.`: `.git`, `.obsidian`) and binary files (a NUL
byte, without a UTF-16 or UTF-32 byte order mark) are skipped and counted in `ReadStats`; files
with other extensions are not corpus files and are passed over.

Everything a file could make slow or wrong is refused before the first document is embedded, in
one `InputError` naming the file:
- a name that is not valid UTF-8 (an id must be text that every store and client can write);
- a file over `MAX_FILE_BYTES` (it would be one document, tokenized whole: split it, or give it as
  a `.txt` corpus, one document per line);
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
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedkit.data.document import Document, ReadStats
from embedkit.data.front_matter import load_front_matter
from embedkit.data.input_files import read_input_bytes
from embedkit.data.values import check_document, lone_surrogate
from embedkit.errors import InputError

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_MARKDOWN = (".md", ".markdown")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")  # CommonMark's ATX heading
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SNIFF = 8192  # bytes looked at for a NUL, as git and grep decide that a file is binary
# A folder's file is one document, tokenized whole before it is cut to the model's length: 5 MB
# took 8 s of CPU here, 16 MB two minutes on a busy machine. 4 MiB holds the longest novels.
MAX_FILE_BYTES = 4 * 1024 * 1024
_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def is_text_folder(path: Path) -> bool:
    """Whether `path` is a folder to read as text files (a folder that is not a BEIR folder)."""
    from embedkit.data.textfiles import find_data_file

    return path.is_dir() and find_data_file(path, "corpus.jsonl") is None


def folder_documents(folder: Path, stats: ReadStats) -> Iterator[Document]:
    """The documents of the text files under `folder` (see the module docstring)."""
    files = sorted(_text_files(folder, stats))
    if not files:
        hidden = f" ({stats.hidden} hidden left out)" if stats.hidden else ""
        raise InputError(
            f"{folder} holds no .txt or .md files{hidden}, and no corpus.jsonl (it is not a BEIR folder "
            "either): give a folder of text files, a BEIR folder or a corpus file"
        )
    for relative in files:
        document = _read_file(folder, relative, stats)
        if document is None:
            stats.binary += 1
        else:
            check_document(
                document.id, document.title, document.text, document.metadata, str(folder / relative)
            )
            yield document


def _text_files(folder: Path, stats: ReadStats) -> Iterator[str]:
    """Relative paths (with `/`) of the corpus files under `folder`; hidden entries counted, not entered."""
    for root, dirs, names in os.walk(folder):
        hidden_dirs = [d for d in dirs if d.startswith(".")]
        stats.hidden += len(hidden_dirs)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith("."):
                stats.hidden += 1
            elif name.lower().endswith(TEXT_SUFFIXES):
                relative = Path(root, name).relative_to(folder).as_posix()
                if lone_surrogate(relative) is not None:  # os.walk keeps undecodable bytes as surrogates
                    raise InputError(
                        f"{folder}: the file name {os.fsencode(relative)!r} is not valid UTF-8, and a "
                        "document's id is its name: rename it (convmv -f latin1 -t utf-8 --notest -r)"
                    )
                yield relative


def _read_file(folder: Path, relative: str, stats: ReadStats) -> Document | None:
    """One file as a document; None for a binary file (a NUL byte without a wide byte order mark)."""
    path = folder / relative
    raw = read_input_bytes(path, limit=MAX_FILE_BYTES + 1)  # a FIFO or device named x.txt: one line
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(
            f"{path} is over {MAX_FILE_BYTES // 2**20} MiB, the most one file of a folder corpus may be "
            "(it is one document): split it, or index it alone as a .txt corpus (one document per line)"
        )
    if b"\0" in raw[:_SNIFF] and not raw.startswith(_WIDE_BOMS):
        return None
    text = _decode(raw, path, stats)
    text = text.replace("\r\n", "\n")
    name = Path(relative).name
    stem = name[: name.rfind(".")] if "." in name else name
    if not relative.lower().endswith(_MARKDOWN):
        return Document(relative, text, stem)
    metadata, body = _front_matter(text, path)
    title = metadata.pop("title", None)
    if not isinstance(title, str) or not title.strip():
        heading, body = _first_heading(body)
        title = heading or stem
    return Document(relative, body, title.strip(), metadata)


def _front_matter(text: str, path: Path) -> tuple[dict[str, Any], str]:
    """A Markdown file's YAML front matter (or {}) and the text after it."""
    if not text.startswith("---\n"):
        return {}, text
    end = re.search(r"^(---|\.\.\.)[ \t]*$", text[4:], re.M)
    if end is None:
        return {}, text  # a thematic break at the top, not front matter
    data = load_front_matter(text[4 : 4 + end.start()], path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InputError(f"{path}: the front matter must be `key: value` lines, got a YAML {kind}")
    return {str(key): value for key, value in data.items()}, text[4 + end.end() :].lstrip("\n")


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


def _first_heading(body: str) -> tuple[str | None, str]:
    """The first ATX heading outside code blocks, and the body without it when it opens the file."""
    lines = body.split("\n")
    fenced = False
    first_text = next((i for i, line in enumerate(lines) if line.strip()), None)
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            if i == first_text:
                return match.group(1), "\n".join(lines[i + 1 :]).lstrip("\n")
            return match.group(1), body
    return None, body
