"""A filter expression held against the metadata fields an index holds (`embedkit.index.where`):
a field it does not hold, or a value of a type the field never holds there, is an `InputError`
naming the position, before anything is searched. `compared_as` says how a literal compares with a
field (a quoted ISO date as a date where the field holds dates), for the checks here and for
`embedkit.index.where_sql`'s SQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal

from embedkit.errors import InputError
from embedkit.index.where import DATE_PATTERN, Compare, Contains, Date, Expr, Member, Not, Value

_DATE = re.compile(DATE_PATTERN)


def kind_of(value: Value) -> str:
    """The field type a literal compares with: number, string, date or bool."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, Decimal)):
        return "number"
    return "date" if isinstance(value, Date) else "string"


def check(expr: Expr, fields: dict[str, set[str]]) -> None:
    """An `InputError` for a field the index does not hold, or a value of a type it never holds there.

    `fields`: name -> the JSON types of its values (`DocStore.metadata_fields`: integer, real, text,
    date, true, false, ...).
    """
    for field, op, value, position in _comparisons(expr):
        if field not in fields:
            known = ", ".join(sorted(fields)[:12]) or "none"
            raise InputError(
                f"where: unknown metadata field {field!r} at position {position} (fields: {known})"
            )
        if op == "contains":
            if "array" not in fields[field]:
                raise InputError(
                    f"where: contains at position {position} tests a list's members; field {field!r} "
                    "holds no lists"
                )
            continue
        held = _held(fields[field])
        wanted = compared_as(value, op, fields[field])
        if op in ("<", "<=", ">", ">=") and wanted not in ("number", "date"):
            raise InputError(
                f"where: {op} at position {position} compares numbers and dates; {field!r} "
                f"is compared with {_a(wanted)} there"
            )
        if wanted not in held:
            plural = {"number": "numbers", "string": "strings", "date": "dates", "bool": "booleans"}
            holds = " and ".join(plural[kind] for kind in sorted(held)) or "nothing comparable"
            lists = (
                f" (lists: test a member with {field} contains {value!r})" if "array" in fields[field] else ""
            )
            raise InputError(
                f"where: field {field!r} at position {position} holds {holds}, not {_a(wanted)} ({value!r})"
                + lists
            )


def _a(kind: str) -> str:
    return {"number": "a number", "string": "a string", "date": "a date", "bool": "a boolean"}[kind]


def _held(types: set[str]) -> set[str]:
    """A field's JSON types as the kinds literals have (a date field's values are strings too)."""
    names = {"integer": "number", "real": "number", "text": "string", "true": "bool", "false": "bool"}
    held = {names[t] for t in types if t in names}
    return held | {"date", "string"} if "date" in types else held


def compared_as(value: Value, op: str, types: set[str]) -> str:
    """A quoted string is compared as a date where it is one and the field holds dates: in a range,
    or where the field holds no other text."""
    kind = kind_of(value)
    ranged = op in ("<", "<=", ">", ">=")
    date = kind == "string" and "date" in types and _DATE.fullmatch(str(value)) is not None
    if date and (ranged or "text" not in types):
        return "date"
    return kind


def _comparisons(expr: Expr) -> Iterator[tuple[str, str, Value, int]]:  # (field, op, value, position)
    if isinstance(expr, Compare):
        yield expr.field, expr.op, expr.value, expr.position
    elif isinstance(expr, Member):
        for value in expr.values:
            yield expr.field, "=", value, expr.position
    elif isinstance(expr, Contains):
        yield expr.field, "contains", expr.value, expr.position
    elif isinstance(expr, Not):
        yield from _comparisons(expr.part)
    else:
        for part in expr.parts:
            yield from _comparisons(part)
