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

No torch, no numpy: `embedkit.data` and `embedkit.index.where` both import it.
"""

from __future__ import annotations

import math
from typing import Any

from embedkit.errors import InputError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DEPTH = 64  # arrays and objects inside each other in one metadata value


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
    module docstring); walks nested lists and objects without recursion."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{what}: {path[1:] or 'a value'} nests arrays or objects over {MAX_DEPTH} deep")
        problem = _problem(item)
        if problem is not None:
            raise InputError(f"{what}: field {path[1:]!r} {problem}")
        if isinstance(item, dict):
            for key, inner in item.items():
                name = str(key)
                if lone_surrogate(name) is not None:
                    raise InputError(f"{what}: the field name {name!r} is not valid UTF-8 text")
                stack.append((inner, f"{path}.{name}", depth + 1))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(item))


def _problem(item: Any) -> str | None:
    if isinstance(item, bool):
        return None
    if isinstance(item, int) and not in_int64(item):
        return (
            f"holds the integer {item}, beyond the 64-bit integers a store holds "
            f"({INT64_MIN} to {INT64_MAX}): write it as a string"
        )
    if isinstance(item, float) and not math.isfinite(item):
        return (
            f"holds {item!r}, a number JSON does not have (NaN or Infinity): leave it out or write a string"
        )
    position = lone_surrogate(item) if isinstance(item, str) else None
    if position is not None:
        return f"holds text that is not valid UTF-8 ({surrogate_bytes(item, position)})"
    return None


def check_document(doc_id: str, title: str, text: str, metadata: dict[str, Any], what: str) -> None:
    """Every field of a document that a command stores or embeds, checked as it is read."""
    for name, value in (("id", doc_id), ("title", title), ("text", text)):
        position = lone_surrogate(value)
        if position is not None:
            raise InputError(
                f"{what}: the {name} is not valid UTF-8 text ({surrogate_bytes(value, position)} at "
                f"character {position + 1})"
            )
    if metadata:
        check_value(metadata, what)
