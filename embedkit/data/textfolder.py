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
byte, or bytes that are not UTF-8) are skipped and counted in `ReadStats`; files with other
extensions are not corpus files and are passed over. YAML is read with PyYAML's `safe_load`
(installed with transformers); a front matter that is not valid YAML is an `InputError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedkit.data.document import Document, ReadStats
from embedkit.data.input_files import read_input_bytes
from embedkit.errors import InputError

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_MARKDOWN = (".md", ".markdown")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")  # CommonMark's ATX heading
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SNIFF = 8192  # bytes looked at for a NUL, as git and grep decide that a file is binary


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
        document = _read_file(folder, relative)
        if document is None:
            stats.binary += 1
        else:
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
                yield Path(root, name).relative_to(folder).as_posix()


def _read_file(folder: Path, relative: str) -> Document | None:
    """One file as a document; None for a binary file (a NUL byte, or not UTF-8)."""
    path = folder / relative
    raw = read_input_bytes(path)  # a FIFO or device named x.txt is one line, never a hang
    if b"\0" in raw[:_SNIFF]:
        return None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return None
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
    import yaml

    try:
        data = yaml.safe_load(text[4 : 4 + end.start()])
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 2})" if line is not None else ""
        raise InputError(f"{path}: the front matter is not valid YAML{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InputError(f"{path}: the front matter must be `key: value` lines, got a YAML {kind}")
    return {str(key): value for key, value in data.items()}, text[4 + end.end() :].lstrip("\n")


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
