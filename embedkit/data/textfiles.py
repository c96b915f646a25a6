"""Line-oriented text files: UTF-8 lines, CSV rows and JSON lines, gzipped or not.

Every reader decodes line by line, so a bad byte, a bad quote or a line that is not JSON is
reported with its file and line number as one `InputError`. The corpus, STS and BEIR readers
(`embedkit.data.corpus`, `.sts`, `.beir`) are built on these.
"""

from __future__ import annotations

import csv
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

from embedkit.data.input_files import open_input
from embedkit.data.values import JSON_NUMBERS, Unheld, number_problem
from embedkit.errors import InputError


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


def text_lines(path: Path, what: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, line without its newline) for a UTF-8 file, gzipped or not.

    `what` names the file in errors ("queries file"); anything but a regular file is refused
    by `embedkit.data.input_files`, the one opener of user files.
    """
    number = 0
    try:
        with open_input(path, what) as handle:
            for raw in handle:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = raw[exc.start : exc.start + 1]
                    raise InputError(
                        f"{path}: line {number + 1} is not valid UTF-8 (byte {exc.start + 1}: {bad!r})"
                    ) from None
                if number == 0:
                    line = line.removeprefix("\ufeff")
                # A lone CR ends a line too (classic Mac files), as in Python's universal newlines.
                for part in line.rstrip("\r\n").split("\r"):
                    number += 1
                    yield number, part
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None



def check_header(header: list[str], path: Path) -> None:
    """A column name given twice is an `InputError`: a row read by name would keep only the last."""
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise InputError(f"{path}: the header names column {name!r} twice; rename one of them")
        seen.add(name)


def csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Non-empty CSV rows with the line each starts on (a quoted field may span lines)."""
    consumed: list[int] = []  # line numbers handed to the csv reader so far

    def feed() -> Iterator[str]:
        for number, line in text_lines(path):
            consumed.append(number)
            yield line + "\n"

    # strict: a quote that is never closed is an error, not a field that swallows the rest of the file
    reader = csv.reader(feed(), strict=True)
    while True:
        start = len(consumed)
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            first = consumed[start] if len(consumed) > start else (consumed[-1] if consumed else 1)
            if "unexpected end of data" in str(exc) or len(consumed) - start > 1:
                raise InputError(
                    f"{path}: line {first}: a quoted field is never closed (unterminated quote)"
                ) from None
            raise InputError(f"{path}: bad CSV at line {consumed[-1] if consumed else 1}: {exc}") from None
        if row:
            yield consumed[start], row



class _RepeatedName(Exception):
    pass


def _object_once_each_name(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, or `_RepeatedName` when it names a field twice (RFC 8259 leaves it undefined)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:  # the first name met a second time
            if name in seen:
                raise _RepeatedName(name)
            seen.add(name)
    return obj


# without keep_blank, every item is an object (the overloads tell a type checker so)
@overload
def json_objects(
    path: Path, *, keep_blank: Literal[False] = False
) -> Iterator[tuple[int, dict[str, Any]]]: ...
@overload
def json_objects(path: Path, *, keep_blank: bool) -> Iterator[tuple[int, dict[str, Any] | None]]: ...
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
            # its numbers as the stores hold them (values.number_from_text), each name once
            obj = json.loads(line, object_pairs_hook=_object_once_each_name, **JSON_NUMBERS)
        except _RepeatedName as exc:  # Python's reader would keep the last, the first silently lost
            raise InputError(f"{path}: line {number} names the field {exc.args[0]!r} twice") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {number} is not valid JSON: {exc.msg}") from None
        except RecursionError:  # the decoder's own bound on nested arrays and objects
            raise InputError(f"{path}: line {number} nests arrays or objects too deeply") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}: line {number} is not a JSON object")
        yield number, obj



def find_data_file(folder: Path, stem: str) -> Path | None:
    """`folder/stem` or `folder/stem.gz`, whichever exists (as anything: the opener says if it is no file)."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if os.path.lexists(candidate):
            return candidate
    return None



def record_id(
    record: dict[str, Any],
    path: Path,
    number: int,
    *,
    column: str | None = None,
    keys: tuple[str, ...] = ("_id", "id"),
    default: str | None = None,
) -> str:
    """The id of a JSON or table record: `column` if given, else the first of `keys` present.

    Without a `default`, a record with none of them is an `InputError` naming the keys found.
    """
    if column is not None:
        if column not in record:
            raise InputError(f"{path}: line {number} has no {column!r} field")
        return _id_text(record[column], column, path, number)
    for key in keys:
        if key in record:
            return _id_text(record[key], key, path, number)
    if default is not None:
        return default
    found = ", ".join(repr(k) for k in record) or "none"
    wanted = " or ".join(repr(k) for k in keys)
    raise InputError(f"{path}: line {number} has no {wanted} (keys found: {found})")


def _id_text(value: Any, key: str, path: Path, number: int) -> str:
    """A record's id as text: a string as it is, a number as JSON writes it (a number no store
    holds, NaN included, is refused as in any other field); anything else is an `InputError`."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, Unheld)) and not isinstance(value, bool):
        problem = number_problem(value)
        if problem is not None:
            raise InputError(f"{path}: line {number}: the id {key!r} {problem}")
        return str(value)
    kind = {bool: "a boolean", type(None): "null", list: "an array", dict: "an object"}.get(type(value))
    kind = kind or type(value).__name__
    raise InputError(f"{path}: line {number}: the id {key!r} is {kind}: write a string")


def string_field(record: dict[str, Any], key: str, path: Path, number: int) -> str:
    """`record[key]` as a string ("" when absent or null); any other type is an `InputError`."""
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{path}: line {number}: {key!r} is {type(value).__name__}, not a string")
    return value
