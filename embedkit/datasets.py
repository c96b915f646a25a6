"""Readers for evaluation data: STS sentence pairs and BEIR retrieval folders.

Every reader decodes line by line, so a bad byte, a bad score or a missing field is reported
with its file and line number as one `InputError`. Files may be gzipped (`name.ext.gz`).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.errors import InputError

STS_COLUMNS = ("sentence1", "sentence2", "score")
STS_FORMATS = (".tsv", ".csv", ".jsonl")


@dataclass(frozen=True)
class StsData:
    """Sentence pairs with gold similarity scores, in file order."""

    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray  # (n,) float64 gold scores

    def __len__(self) -> int:
        return len(self.sentences1)


@dataclass(frozen=True)
class BeirData:
    """A BEIR folder's documents, the judged queries and their graded judgments (one split)."""

    corpus: dict[str, dict[str, str]]  # doc id -> {"title": ..., "text": ...}
    queries: dict[str, str]  # query id -> text, only the queries the qrels judge (as BEIR loads them)
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> grade

    def document_texts(self) -> tuple[list[str], list[str]]:
        """Doc ids and texts to embed: title + " " + text, stripped (as BEIR's SentenceBERT wrapper)."""
        ids = list(self.corpus)
        texts = [f"{self.corpus[i]['title']} {self.corpus[i]['text']}".strip() for i in ids]
        return ids, texts


def data_format(path: Path, formats: tuple[str, ...]) -> str:
    """The format suffix of `path` (`.tsv`, ...), looking through a `.gz`; `InputError` if unknown."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    suffix = suffixes[-1] if suffixes else ""
    if suffix not in formats:
        known = ", ".join(f"{f}[.gz]" for f in formats)
        raise InputError(f"{path}: unknown format {suffix or '(no extension)'!r}: use {known}")
    return suffix


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for a UTF-8 file, gzipped or not."""
    if not path.exists():
        raise InputError(f"file not found: {path}")
    if path.is_dir():
        raise InputError(f"expected a file, got a folder: {path}")
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = raw[exc.start : exc.start + 1]
                    raise InputError(
                        f"{path}: line {number} is not valid UTF-8 (byte {exc.start + 1}: {bad!r})"
                    ) from None
                if number == 1:
                    line = line.removeprefix("\ufeff")
                yield number, line.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


def read_sts(path: str | Path) -> StsData:
    """Read sentence pairs from a TSV, CSV or JSONL file (gz accepted) with `sentence1, sentence2, score`.

    TSV is split on tabs with no quoting (a `"` is an ordinary character); CSV uses standard
    quoting; TSV and CSV need a header row, other columns are ignored. JSONL holds one object
    per line with those keys.
    """
    path = Path(path)
    fmt = data_format(path, STS_FORMATS)
    rows = _jsonl_pairs(path) if fmt == ".jsonl" else _delimited_pairs(path, fmt)
    first: list[str] = []
    second: list[str] = []
    scores: list[float] = []
    for number, sentence1, sentence2, score in rows:
        first.append(sentence1)
        second.append(sentence2)
        scores.append(_parse_score(score, path, number))
    if not first:
        raise InputError(f"{path} holds no sentence pairs")
    return StsData(first, second, np.asarray(scores, dtype=np.float64))


def _delimited_pairs(path: Path, fmt: str) -> Iterator[tuple[int, str, str, str]]:
    if fmt == ".tsv":
        records = ((n, line.split("\t")) for n, line in text_lines(path) if line.strip())
    else:
        records = csv_rows(path)
    first = next(records, None)
    if first is None:
        raise InputError(f"{path} is empty")
    header = first[1]
    columns = [name.strip().lower() for name in header]
    missing = [c for c in STS_COLUMNS if c not in columns]
    if missing:
        found = ", ".join(repr(name) for name in header)
        raise InputError(f"{path}: the header lacks {', '.join(missing)} (columns found: {found})")
    index = [columns.index(c) for c in STS_COLUMNS]
    for number, fields in records:
        if len(fields) != len(header):
            raise InputError(f"{path}: line {number} has {len(fields)} fields, the header has {len(header)}")
        yield number, fields[index[0]], fields[index[1]], fields[index[2]]


def csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Non-empty CSV rows with the line each starts on (a quoted field may span lines)."""
    consumed: list[int] = []  # line numbers handed to the csv reader so far

    def feed() -> Iterator[str]:
        for number, line in text_lines(path):
            consumed.append(number)
            yield line + "\n"

    reader = csv.reader(feed())
    while True:
        start = len(consumed)
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(f"{path}: bad CSV at line {consumed[-1] if consumed else 1}: {exc}") from None
        if row:
            yield consumed[start], row


def _jsonl_pairs(path: Path) -> Iterator[tuple[int, str, str, str]]:
    empty = True
    for number, obj in json_objects(path):
        empty = False
        missing = [c for c in STS_COLUMNS if c not in obj]
        if missing:
            found = ", ".join(repr(k) for k in obj) or "none"
            raise InputError(f"{path}: line {number} lacks {', '.join(missing)} (keys found: {found})")
        for key in ("sentence1", "sentence2"):
            if not isinstance(obj[key], str):
                raise InputError(f"{path}: line {number}: {key} is {type(obj[key]).__name__}, not a string")
        yield number, obj["sentence1"], obj["sentence2"], obj["score"]
    if empty:
        raise InputError(f"{path} is empty")


def json_objects(path: Path, *, keep_blank: bool = False) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """The JSON object on each line of a JSONL file with its line number; a bad line is an `InputError`.

    Blank lines are skipped, or yielded as `(number, None)` with `keep_blank` (so a caller can count them).
    """
    for number, line in text_lines(path):
        if not line.strip():
            if keep_blank:
                yield number, None
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {number} is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}: line {number} is not a JSON object")
        yield number, obj


def _parse_score(value: Any, path: Path, number: int) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if isinstance(value, bool) or not math.isfinite(score):
        raise InputError(f"{path}: line {number}: bad score {value!r} (expected a finite number)")
    return score


def find_data_file(folder: Path, stem: str) -> Path | None:
    """`folder/stem` or `folder/stem.gz`, whichever exists."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_beir(folder: str | Path, split: str = "test") -> BeirData:
    """Read a BEIR folder: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (each may be .gz).

    As BEIR's `GenericDataLoader`: the qrels' first line is a header (`query-id, corpus-id,
    score`; it is recognised, not assumed), documents carry `_id`, `title`, `text`, and only
    queries that the qrels judge are kept.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"BEIR folder not found: {folder}")
    qrels_path = find_data_file(folder / "qrels", f"{split}.tsv")
    if qrels_path is None:
        splits = sorted({p.name.split(".")[0] for p in (folder / "qrels").glob("*.tsv*")})
        found = f" (splits found: {', '.join(splits)})" if splits else ""
        raise InputError(f"{folder} has no qrels/{split}.tsv: not a BEIR folder, or no such split{found}")
    paths = {name: find_data_file(folder, f"{name}.jsonl") for name in ("corpus", "queries")}
    for name, path in paths.items():
        if path is None:
            raise InputError(f"{folder} has no {name}.jsonl: not a BEIR folder")
    qrels = read_qrels(qrels_path)
    corpus = _read_corpus(paths["corpus"])  # type: ignore[arg-type]
    all_queries = _read_queries(paths["queries"])  # type: ignore[arg-type]
    unknown = [q for q in qrels if q not in all_queries]
    if unknown:
        raise InputError(
            f"{qrels_path} judges {len(unknown)} queries that {paths['queries']} lacks (e.g. {unknown[0]!r})"
        )
    return BeirData(corpus=corpus, queries={q: all_queries[q] for q in qrels}, qrels=qrels)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """`query-id <tab> corpus-id <tab> integer grade`, with or without a header line."""
    qrels: dict[str, dict[str, int]] = {}
    first = True
    for number, line in text_lines(path):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise InputError(f"{path}: line {number} has {len(fields)} tab-separated fields, expected 3")
        query_id, doc_id, grade = (f.strip() for f in fields)
        try:
            value = int(grade)
        except ValueError:
            if first:  # the header
                first = False
                continue
            raise InputError(
                f"{path}: line {number}: bad relevance grade {grade!r} (expected an integer)"
            ) from None
        first = False
        qrels.setdefault(query_id, {})[doc_id] = value
    if not qrels:
        raise InputError(f"{path} holds no judgments")
    return qrels


def _read_corpus(path: Path) -> dict[str, dict[str, str]]:
    corpus: dict[str, dict[str, str]] = {}
    for number, obj in json_objects(path):
        doc_id = _record_id(obj, path, number)
        if doc_id in corpus:
            raise InputError(f"{path}: line {number} repeats document id {doc_id!r}")
        corpus[doc_id] = {
            "title": _text_field(obj, "title", path, number),
            "text": _text_field(obj, "text", path, number),
        }
    if not corpus:
        raise InputError(f"{path} is empty")
    return corpus


def _read_queries(path: Path) -> dict[str, str]:
    return {_record_id(obj, path, n): _text_field(obj, "text", path, n) for n, obj in json_objects(path)}


def _record_id(obj: dict[str, Any], path: Path, number: int) -> str:
    if "_id" not in obj:
        found = ", ".join(repr(k) for k in obj) or "none"
        raise InputError(f"{path}: line {number} has no '_id' (keys found: {found})")
    return str(obj["_id"])


def _text_field(obj: dict[str, Any], key: str, path: Path, number: int) -> str:
    value = obj.get(key) or ""
    if not isinstance(value, str):
        raise InputError(f"{path}: line {number}: {key} is {type(value).__name__}, not a string")
    return value
