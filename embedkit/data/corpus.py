"""Reading text corpora: documents for indexing, and sentence samples for training.

`read_documents` streams documents from a file or a BEIR folder:

- `.txt`: one document per line; its id is the 1-based line number (plus `first_line_id`: an
  append numbers a second file's lines on after the index's ids);
- `.jsonl`: one JSON object per line with `text` (and optionally `title`, `_id` or `id`); other
  fields go to `metadata`;
- `.csv` (standard quoting) and `.tsv` (split on tabs, no quoting, as STS and BEIR files are):
  a header row; the text column is `column`, else `text`;
- a BEIR folder: its `corpus.jsonl`;
- any other folder: its `.txt`, `.md`, `.pdf`, `.html` and `.docx` files, one document each
  (`embedkit.data.textfolder`); a single `.md`, `.pdf`, `.html` or `.docx` file: one document;
- any of these gzipped (`name.jsonl.gz`).

Blank documents are skipped and counted. A byte that is not UTF-8, a line that is not JSON or a
missing column is one `InputError` naming the file and line; so is a value that the stores cannot
hold (`embedkit.data.values`: NaN, an integer beyond 64 bits, a lone surrogate), found as the
line is read, before anything is embedded. `load_sentences` turns a corpus (or
a list of texts) into the de-duplicated, optionally sentence-split and sub-sampled list that
training uses, with the counts of each step. No torch here.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from embedkit.data.document import Document, ReadStats
from embedkit.data.input_files import check_input_file, check_input_file_or_folder
from embedkit.data.sentences import split_into_sentences
from embedkit.data.textfiles import (
    check_header,
    csv_rows,
    data_format,
    find_data_file,
    json_objects,
    record_id,
    string_field,
    text_lines,
)
from embedkit.data.textfolder import folder_documents, is_documents
from embedkit.data.values import check_document
from embedkit.errors import InputError

CORPUS_FORMATS = (".txt", ".jsonl", ".csv", ".tsv")
_ID_KEYS = ("_id", "id")


def corpus_file(path: str | Path) -> Path:
    """The file to read for `path`: the file itself, or a BEIR folder's `corpus.jsonl[.gz]`."""
    # A pipe (`<(zcat ...)`) is refused with the rest: a corpus is read twice (count, then embed).
    path = check_input_file_or_folder(path, "corpus")
    if path.is_dir():
        found = find_data_file(path, "corpus.jsonl")
        if found is None:
            raise InputError(f"{path} is a folder without corpus.jsonl: not a BEIR folder")
        return check_input_file(found, "corpus")
    data_format(path, CORPUS_FORMATS)
    return path


def is_line_file(path: str | Path) -> bool:
    """Whether `path` is a `.txt` corpus (`.txt.gz` too), whose ids are line numbers."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    return path.is_file() and suffixes[-1:] == [".txt"]


def read_documents(
    path: str | Path,
    column: str | None = None,
    id_column: str | None = None,
    *,
    stats: ReadStats | None = None,
    first_line_id: int = 0,
) -> Iterator[Document]:
    """Stream the documents of a corpus file or BEIR folder (see the module docstring).

    `column` names the text field of a CSV/TSV row or JSON record (default `text`); `id_column`
    the id field (default `_id` or `id` when present, else the line or row number). Pass a
    `ReadStats` to learn how many blank records (and files of a folder) were skipped.
    """
    counts = stats if stats is not None else ReadStats()
    folder = Path(path).expanduser()
    if is_documents(folder):
        if column is not None or id_column is not None:
            what = "a folder of documents" if folder.is_dir() else "a document file"
            raise InputError(f"{folder}: {what} has no columns; drop --column / --id-column")
        records: Iterator[Document] = folder_documents(folder, counts)
        file, fmt = folder, "folder"
    else:
        file = corpus_file(path)
        fmt = data_format(file, CORPUS_FORMATS)
    if fmt == ".txt":
        if column is not None or id_column is not None:
            raise InputError(f"{file}: a .txt corpus has no columns; drop --column")
        records = (Document(str(first_line_id + n), line) for n, line in text_lines(file))
    elif fmt == "folder":
        pass
    elif fmt == ".jsonl":
        records = _jsonl_documents(file, column, id_column)
    else:
        records = _table_documents(file, fmt, column, id_column)
    for document in records:
        if document.text.strip() or document.title.strip():
            counts.read += 1
            yield document
        else:
            counts.blank += 1


def _jsonl_documents(path: Path, column: str | None, id_column: str | None) -> Iterator[Document]:
    text_key = column or "text"
    for number, record in json_objects(path, keep_blank=True):
        if record is None:
            yield Document(str(number), "")  # counted as blank by the caller
            continue
        if text_key not in record:
            keys = ", ".join(repr(k) for k in record) or "none"
            raise InputError(f"{path}: line {number} has no {text_key!r} field (keys found: {keys})")
        text = string_field(record, text_key, path, number)
        title = string_field(record, "title", path, number) if text_key != "title" else ""
        doc_id = record_id(record, path, number, column=id_column, keys=_ID_KEYS, default=str(number))
        used = {text_key, "title", id_column, *_ID_KEYS}
        metadata = {k: v for k, v in record.items() if k not in used}
        metadata = check_document(doc_id, title, text, metadata, f"{path}: line {number}")  # before embedding
        yield Document(doc_id, text, title, metadata)


def _table_documents(path: Path, fmt: str, column: str | None, id_column: str | None) -> Iterator[Document]:
    rows = _tsv_rows(path) if fmt == ".tsv" else csv_rows(path)
    first = next(rows, None)
    if first is None:
        raise InputError(f"{path} is empty (a {fmt} corpus needs a header row)")
    header = [name.strip() for name in first[1]]
    check_header(header, path)
    text_key = column or "text"
    for wanted in (text_key, id_column):
        if wanted is not None and wanted not in header:
            available = ", ".join(repr(h) for h in header)
            hint = "" if column else "; pick one with --column"
            raise InputError(f"{path} has no column {wanted!r} (columns: {available}){hint}")
    for number, fields in rows:
        if len(fields) != len(header):
            raise InputError(f"{path}: line {number} has {len(fields)} fields, the header has {len(header)}")
        record = dict(zip(header, fields, strict=True))
        doc_id = record_id(record, path, number, column=id_column, keys=_ID_KEYS, default=str(number))
        used = {text_key, id_column, *_ID_KEYS}
        yield Document(doc_id, record[text_key], "", {k: v for k, v in record.items() if k not in used})


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    for number, line in text_lines(path):
        if line.strip():
            yield number, line.split("\t")


# --- training samples ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusStats:
    """What happened between the corpus and the training sentences, step by step."""

    read: int  # non-blank documents (or texts) read
    blank: int  # blank documents skipped
    after_split: int  # sentences after --split-sentences (= read without it)
    duplicates: int  # repeated sentences removed (first occurrence kept)
    sampled: int  # sentences kept after --limit (= the unique sentences without it)
    held_out: int = 0  # sentences set aside before --limit (dev pseudo queries and their kin)

    def describe(self) -> str:
        parts = [f"{self.read:,} texts read"]
        if self.blank:
            parts.append(f"{self.blank:,} blank skipped")
        if self.after_split != self.read:
            parts.append(f"{self.after_split:,} sentences after splitting")
        parts.append(f"{self.duplicates:,} duplicates removed")
        if self.held_out:
            parts.append(f"{self.held_out:,} held out for the dev queries")
        parts.append(f"{self.sampled:,} kept")
        return ", ".join(parts)


@dataclass(frozen=True)
class CorpusSample:
    """The training sentences, how they were obtained, and a hash of them."""

    sentences: list[str]
    stats: CorpusStats
    fingerprint: str  # sha256 (16 hex digits) of the sentences in order, one per line


def load_sentences(
    path_or_texts: str | Path | Sequence[str],
    column: str | None = None,
    split_sentences: bool = False,
    limit: int | None = None,
    seed: int = 0,
    exclude: Callable[[list[str]], tuple[list[str], int]] | None = None,
) -> CorpusSample:
    """Training sentences from a corpus (any `read_documents` format) or a list of texts.

    White space is collapsed, blank texts skipped, documents optionally split into sentences,
    duplicates removed (the first occurrence kept, in corpus order), and with `limit` a subset of
    that many sentences drawn with `seed`: the same corpus, limit and seed always give the same
    sentences (in corpus order). `exclude(sentences) -> (kept, dropped)` removes held-out texts
    before the subset is drawn, so `limit` still counts training sentences. An empty result is an
    `InputError`.
    """
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}")
    read = ReadStats()
    if isinstance(path_or_texts, (str, Path)):
        texts: Iterator[str] = (d.full_text for d in read_documents(path_or_texts, column, stats=read))
        source = str(path_or_texts)
    else:
        texts = _checked_texts(path_or_texts, read)
        source = "the texts given"
    pieces = 0
    unique: dict[str, None] = {}  # an insertion-ordered set
    for text in texts:
        for sentence in split_into_sentences(text) if split_sentences else [" ".join(text.split())]:
            pieces += 1
            unique.setdefault(sentence, None)
    sentences = list(unique)
    if not sentences:
        raise InputError(f"no sentences in {source}: it is empty or every line is blank")
    held_out = 0
    if exclude is not None:
        sentences, held_out = exclude(sentences)
        if not sentences:
            raise InputError(f"no sentences in {source} are left once the dev queries are held out")
    if limit is not None and limit < len(sentences):
        chosen = sorted(random.Random(seed).sample(range(len(sentences)), limit))
        sentences = [sentences[i] for i in chosen]
    stats = CorpusStats(
        read=read.read,
        blank=read.blank,
        after_split=pieces,
        duplicates=pieces - len(unique),
        sampled=len(sentences),
        held_out=held_out,
    )
    return CorpusSample(sentences, stats, sentences_fingerprint(sentences))


def _checked_texts(texts: Sequence[str], stats: ReadStats) -> Iterator[str]:
    if isinstance(texts, (bytes, bytearray)):
        raise InputError("pass a path or a list of strings, not bytes")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {i} is {type(text).__name__}, not str")
        if text.strip():
            stats.read += 1
            yield text
        else:
            stats.blank += 1


def sentences_fingerprint(sentences: Sequence[str]) -> str:
    """A short hash of a list of sentences in order: the training data's identity."""
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update(sentence.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]
