"""STS sentence pairs: `sentence1, sentence2, score` in TSV, CSV or JSON lines (gz accepted)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.input_files import check_input_file
from embedkit.data.textfiles import check_header, csv_rows, data_format, json_objects, text_lines
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




def read_sts(path: str | Path) -> StsData:
    """Read sentence pairs from a TSV, CSV or JSONL file (gz accepted) with `sentence1, sentence2, score`.

    TSV is split on tabs with no quoting (a `"` is an ordinary character); CSV uses standard
    quoting; TSV and CSV need a header row, other columns are ignored. JSONL holds one object
    per line with those keys.
    """
    path = check_input_file(path, "STS file")
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
    if len(set(scores)) < 2:
        raise InputError(
            f"{path}: every gold score is {scores[0]:g}; a correlation needs at least two different scores"
        )
    return StsData(first, second, np.asarray(scores, dtype=np.float64))


def _delimited_pairs(path: Path, fmt: str) -> Iterator[tuple[int, str, str, str]]:
    records: Iterator[tuple[int, list[str]]]
    if fmt == ".tsv":
        records = ((n, line.split("\t")) for n, line in text_lines(path) if line.strip())
    else:
        records = csv_rows(path)
    first = next(records, None)
    if first is None:
        raise InputError(f"{path} is empty")
    header = first[1]
    columns = [name.strip().lower() for name in header]
    check_header(columns, path)
    missing = [c for c in STS_COLUMNS if c not in columns]
    if missing:
        found = ", ".join(repr(name) for name in header)
        raise InputError(f"{path}: the header lacks {', '.join(missing)} (columns found: {found})")
    index = [columns.index(c) for c in STS_COLUMNS]
    for number, fields in records:
        if len(fields) != len(header):
            raise InputError(f"{path}: line {number} has {len(fields)} fields, the header has {len(header)}")
        yield number, fields[index[0]], fields[index[1]], fields[index[2]]



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



def _parse_score(value: Any, path: Path, number: int) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if isinstance(value, bool) or not math.isfinite(score):
        raise InputError(f"{path}: line {number}: bad score {value!r} (expected a finite number)")
    return score

