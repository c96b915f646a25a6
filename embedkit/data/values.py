"""What a stored value may be: text that is valid Unicode, numbers that the stores hold exactly.

One owner for the rules that every reader of documents and every filter applies, so that a value
the document store (SQLite's JSON) or a Milvus collection cannot hold is refused when it is read,
in one line naming where it came from, never half way through indexing:

- text: no lone surrogate (U+D800 to U+DFFF alone). Python makes them from bytes that are not
  UTF-8 in a command-line argument or a file name (`surrogateescape`), and JSON's `"\\ud800"`
  escape writes one; no UTF-8 encoder (SQLite, the tokenizer, an HTTP client) can write them;
- integers: 64-bit signed, as SQLite and Milvus store them (beyond, SQLite turns them into
  floats, and two neighbours compare equal);
- floats: finite. JSON has no NaN or Infinity; Python's `json` reads them (and 1e400 as
  Infinity) but SQLite's JSON refuses them;
- nesting: at most `MAX_DEPTH` arrays and objects inside each other.

A document's metadata becomes JSON in one place, `json_metadata`, whatever gave it (the Python API,
a Markdown file's front matter, a JSON record): a value with an exact JSON value is converted to it
(numpy numbers and booleans, `Decimal`, a tuple or a numpy array as a list, a date or date-time as
its ISO text, as a front matter's dates always were); anything else (a set, bytes, a `Decimal` or
`numpy.longdouble` no float holds exactly, any other object) is refused naming the field. Field names
are text: a number, a boolean or null becomes the name JSON gives it (`1`, `true`, `null`), and two
names that become one are refused, never one field silently dropped.

Every number written as text (a JSONL value, a YAML value, a qrels grade, a filter literal) is
converted by `number_from_text` (`JSON_NUMBERS` for JSON), which decides on the digits before
converting: Python refuses to turn over 4,300 digits into an int (a `ValueError` far from the
input), and no store holds more than 19. A number no store holds comes back as `Unheld`, which
`check_value` refuses naming its field; `number_problem` is the one judgement of a number, read
from text or handed in from Python.
An id, stored or looked up (delete, get), is checked by `check_id`.

No torch, no numpy: `embedkit.data` and `embedkit.index.where` both import it (a numpy value is told
by its type's module, without importing numpy).
"""

from __future__ import annotations

import datetime
import math
import numbers
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from embedkit.errors import InputError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 64  # arrays and objects inside each other in one metadata value
MAX_INT_DIGITS = len(str(INT64_MAX))  # 19: a longer integer is beyond every store, whatever its digits
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, repr=False)
class Unheld:
    """A number read from text that no store holds (an integer beyond 64 bits, NaN, Infinity, a
    float beyond 64-bit floats), kept as written so that `check_value` refuses it naming its field."""

    text: str

    def __str__(self) -> str:
        return shown_number(self.text)

    __repr__ = __str__


def number_from_text(text: str) -> int | float | Unheld:
    """The number `text` writes (JSON's and YAML's integers and floats, NaN and Infinity included):
    an int where it is an integer, else a float; `Unheld` where no store holds it. An integer's
    size is judged on its digits before `int()` sees them. A `ValueError` where it is no number."""
    if _INTEGER.fullmatch(text):
        digits = text.lstrip("+-").lstrip("0") or "0"  # int() counts leading zeros in its limit too
        if len(digits) > MAX_INT_DIGITS:
            return Unheld(text)
        value: int | float = -int(digits) if text.startswith("-") else int(digits)
    else:
        value = float(text)  # any length: floats have no digit limit, and overflow to infinity
    return value if number_problem(value) is None else Unheld(text)


def shown_number(text: str) -> str:
    """`text` as an error line shows it: a number of over 40 characters by its ends and length."""
    if len(text) <= 40:
        return text
    return f"{text[:12]}...{text[-6:]} ({len(text):,} characters)"


def number_problem(value: int | float | Unheld) -> str | None:
    """Why no store holds the number `value`, or None: the one judgement of every number."""
    beyond = f"beyond the 64-bit integers a store holds ({INT64_MIN} to {INT64_MAX}): write it as a string"
    no_float = "a number JSON does not have (NaN, Infinity, beyond 64-bit floats): leave it out or write text"
    if isinstance(value, Unheld):
        if _INTEGER.fullmatch(value.text):
            return f"holds the integer {value}, {beyond}"
        return f"holds {value}, {no_float}"
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not in_int64(value):
        # str() of an int over 4,300 digits is a ValueError: a huge one is told by its bits
        bits = value.bit_length()
        size = f"{len(str(abs(value))):,} digits" if bits < 10_000 else f"{bits:,} bits"
        return f"holds an integer of {size}, {beyond}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"holds {value!r}, {no_float}"
    return None


# `json.loads(text, **JSON_NUMBERS)`: every number converted by `number_from_text` (no `ValueError`
# for a long integer; NaN, Infinity and 1e400 as `Unheld`, refused with their field by `check_value`)
JSON_NUMBERS: dict[str, Any] = {
    name: number_from_text for name in ("parse_int", "parse_float", "parse_constant")
}




def lone_surrogate(text: str) -> int | None:
    """The 0-based position of the first lone surrogate in `text`, or None if it encodes as UTF-8."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def surrogate_bytes(text: str, position: int) -> str:
    """How the character at `position` reads to a user: `byte 0xe9` for an undecodable byte
    (Python's `surrogateescape` keeps bytes 0x80-0xff as U+DC80-U+DCFF), else `U+D800`."""
    code = ord(text[position])
    return f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"


def check_text(text: str, what: str) -> str:
    """`text`, or an `InputError` saying that `what` is not valid Unicode, and where."""
    position = lone_surrogate(text)
    if position is not None:
        raise InputError(
            f"{what} is not valid UTF-8 text: {surrogate_bytes(text, position)} at character "
            f"{position + 1} is not a character (a byte that is not UTF-8, or a lone surrogate)"
        )
    return text


def in_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def check_value(value: Any, what: str) -> None:
    """An `InputError` naming `what` and the field for a value the stores cannot hold (see the
    module docstring): `json_metadata`'s checks, for a value of any kind."""
    _json_value(value, what, "", 0)


def _problem(item: Any) -> str | None:
    if isinstance(item, (int, float, Unheld)):
        return number_problem(item)
    position = lone_surrogate(item) if isinstance(item, str) else None
    if position is not None:
        return f"holds text that is not valid UTF-8 ({surrogate_bytes(item, position)})"
    return None


class _NotJson(Exception):
    """A value with no exact JSON value; its message says what it is and what to write instead."""


def json_metadata(metadata: Mapping[Any, Any], what: str) -> dict[str, Any]:
    """`metadata` as the JSON object the stores hold (see the module docstring), or an `InputError`
    naming `what` and the field. Every value is also checked as `check_value` checks it."""
    return _json_value(metadata, what, "", 0)


def _json_value(value: Any, what: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise InputError(f"{what}: {path[1:] or 'a value'} nests arrays or objects over {MAX_DEPTH} deep")
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        value = _from_numpy(value, what, path)
    if isinstance(value, Mapping):
        converted: dict[str, Any] = {}
        given: dict[str, Any] = {}
        for key, inner in value.items():
            name = _field_name(key, what, path)
            if name in converted:
                raise InputError(
                    f"{what}: the field names {given[name]!r} and {key!r}{_under(path)} are both {name!r} "
                    "in JSON: rename one"
                )
            given[name] = key
            converted[name] = _json_value(inner, what, f"{path}.{name}", depth + 1)
        return converted
    if isinstance(value, (list, tuple)):
        return [_json_value(inner, what, f"{path}[{i}]", depth + 1) for i, inner in enumerate(value)]
    try:
        scalar = _json_scalar(value)
    except _NotJson as exc:
        raise InputError(f"{what}: field {path[1:]!r} holds {exc}") from None
    problem = _problem(scalar)
    if problem is not None:
        raise InputError(f"{what}: field {path[1:]!r} {problem}")
    return scalar


def _from_numpy(value: Any, what: str, path: str) -> Any:
    """A numpy array as nested lists, a numpy scalar as Python's, exactly; a datetime64 as its ISO
    text (its `tolist` would give nanoseconds as a bare integer), a timedelta64 refused."""
    import numpy

    kind = getattr(getattr(value, "dtype", None), "kind", "")
    if kind == "M":
        return numpy.datetime_as_string(value).tolist()
    if kind == "m":
        raise InputError(f"{what}: field {path[1:]!r} holds a timedelta64, which is not a JSON value")
    return value.tolist()


def _under(path: str) -> str:
    return f" (in {path[1:]!r})" if path else ""


def _field_name(key: Any, what: str, path: str) -> str:
    """A field name as JSON writes it: text as it is; a number, boolean or null as JSON spells it."""
    if type(key).__module__ == "numpy" and hasattr(key, "tolist"):
        key = _from_numpy(key, what, path)
    if isinstance(key, str):
        name = str.__str__(key)
    elif key is None or isinstance(key, bool):
        name = {None: "null", True: "true", False: "false"}[key]
    elif isinstance(key, Unheld):
        raise InputError(f"{what}: a field name{_under(path)} {number_problem(key)}")
    elif isinstance(key, (int, float, Decimal, datetime.date)):
        try:
            scalar = _json_scalar(key)
        except _NotJson as exc:
            raise InputError(f"{what}: a field name{_under(path)} is {exc}") from None
        if isinstance(scalar, int) and not in_int64(scalar):  # as text, past 4,300 digits Python refuses
            raise InputError(f"{what}: a field name{_under(path)} is an integer beyond 64 bits: write text")
        if isinstance(scalar, float) and not math.isfinite(scalar):
            raise InputError(f"{what}: a field name{_under(path)} is {scalar!r}, which JSON cannot write")
        name = scalar if isinstance(scalar, str) else repr(scalar)
    else:
        kind = type(key).__name__
        raise InputError(f"{what}: a field name{_under(path)} is a {kind}; field names are text")
    if lone_surrogate(name) is not None:
        raise InputError(f"{what}: the field name {name!r} is not valid UTF-8 text")
    return name


def _json_scalar(value: Any) -> Any:
    """The JSON scalar (None, bool, int, float, str) that is exactly `value`, or `_NotJson`."""
    if value is None or isinstance(value, (bool, Unheld)):  # Unheld: refused by `_problem`, naming it
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (an enum's member) as its text
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, numbers.Real):  # numpy's long double: exact only where a float holds it
        as_float = float(value)
        if as_float == value or not math.isfinite(as_float):
            return as_float
        raise _NotJson(f"{value!r}, which no float holds exactly: write it as a string")
    if isinstance(value, (datetime.date, datetime.datetime)):
        return str(value)  # ISO 8601: 2024-01-31, 2024-01-31 10:00:00+00:00
    kind = type(value).__name__
    advice = {"set": "give a list", "frozenset": "give a list", "bytes": "decode it to text"}
    raise _NotJson(f"a {kind}, which is not a JSON value: {advice.get(kind, 'give text or a number')}")


def _decimal(value: Decimal) -> int | float:
    """A `Decimal` as the int or float that JSON writes as exactly its digits."""
    if not value.is_finite():  # NaN or Infinity: refused as any float's
        return math.nan if value.is_nan() else float(value)
    if value == value.to_integral_value() and value.adjusted() < 20:  # past 20 digits no int64 holds it
        return int(value)
    as_float = float(value)
    if not math.isfinite(as_float) or Decimal(repr(as_float)) != value:
        raise _NotJson(f"Decimal({str(value)!r}), which no float holds exactly: write it as a string")
    return as_float


def check_id(doc_id: Any, what: str = "a document id") -> str:
    """`doc_id` where it can be an id (a non-empty string that is valid UTF-8), else an
    `InputError`: the one check of an id taken from a user, to store or to look up."""
    if not isinstance(doc_id, str) or not doc_id:
        raise InputError(f"{what} must be a non-empty string, not {_short(doc_id)}")
    position = lone_surrogate(doc_id)
    if position is not None:
        raise InputError(
            f"{what} is not valid UTF-8 text ({surrogate_bytes(doc_id, position)} at character "
            f"{position + 1} of {doc_id!r})"
        )
    return doc_id


def check_ids(ids: Sequence[Any], what: str = "a document id") -> list[str]:
    """Every id of `ids` through `check_id` (a lookup by id: delete, get), as a list."""
    if isinstance(ids, (str, bytes)):
        raise InputError("ids is a list of ids, not one string")
    return [check_id(doc_id, what) for doc_id in ids]


def _short(value: Any) -> str:
    shown = repr(value) if not isinstance(value, int) or number_problem(value) is None else "a long integer"
    return shown if len(shown) <= 60 else shown[:57] + "..."


def check_document(
    doc_id: str, title: str, text: str, metadata: Mapping[Any, Any], what: str
) -> dict[str, Any]:
    """Every field of a document that a command stores or embeds, checked as it is read; returns
    the metadata as the stores hold it (`json_metadata`)."""
    check_id(doc_id, f"{what}: the id")
    for name, value in (("title", title), ("text", text)):
        position = lone_surrogate(value)
        if position is not None:
            raise InputError(
                f"{what}: the {name} is not valid UTF-8 text ({surrogate_bytes(value, position)} at "
                f"character {position + 1})"
            )
    return json_metadata(metadata, what) if metadata else {}
