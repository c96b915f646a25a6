"""Chroma's `where` filters (`{"year": {"$gte": 2020}}`) as embedkit's filter expressions.

A user of Chroma writes a metadata filter as a dict; `expression_of` writes the same filter in the
language of `embedkit.index.where` (`year >= 2020`), which then parses and checks it as any
`--where`. Supported: `{"field": value}` (equality), `{"field": {"$op": value}}` with `$eq`,
`$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in`, `$nin`, `$contains` and `$not_contains` (a list
field holding a value among its members: `tags contains "a"`), and `{"$and": [...]}`,
`{"$or": [...]}`; several keys in one dict are joined by `and`, as in Chroma. Values: strings,
numbers, booleans. The negations keep what Chroma keeps: `$ne`, `$nin` and `$not_contains` pass a
document without the field, or of another type there, as `(lang = "en") is not true` does (SQL's
two-valued negation; embedkit's own `lang != "en"` follows three-valued logic and leaves such a
document out, `embedkit.index.where`). A dict nested deeper than the filter's limit
(`MAX_DEPTH`) is refused before it is walked.
"""

from __future__ import annotations

from typing import Any

from embedkit.data.values import number_problem
from embedkit.errors import InputError
from embedkit.index.where import MAX_DEPTH

OPERATORS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
JOINS = {"$and": "and", "$or": "or"}
NEGATIONS = {"$ne": "$eq", "$nin": "$in", "$not_contains": "$contains"}  # each and its positive
MEMBERS = ("$in", "$nin", "$contains", "$not_contains")


def expression_of(where: Any, depth: int = 1) -> str:
    """The filter expression that says what the dict `where` says; an `InputError` for a dict
    this translation does not know (naming the key), or one nested over `MAX_DEPTH` levels."""
    if depth > MAX_DEPTH:
        raise InputError(f"where: the filter nests $and and $or over {MAX_DEPTH} levels deep")
    if not isinstance(where, dict) or not where:
        raise InputError(f"where: a filter is a non-empty dict or an expression string, not {_shown(where)}")
    parts = []
    for key, value in where.items():
        if key in JOINS:
            if not isinstance(value, list) or not value:
                raise InputError(f"where: {key} takes a non-empty list of filters")
            parts.append(
                "(" + f" {JOINS[key]} ".join(f"({expression_of(v, depth + 1)})" for v in value) + ")"
            )
        elif not isinstance(key, str) or key.startswith("$") or "`" in key or not key:
            known = ", ".join([*JOINS, *OPERATORS, *MEMBERS])
            raise InputError(f"where: unknown operator or field {key!r} (use {known})")
        else:
            parts.append(_comparison(f"`{key}`", value))
    return " and ".join(parts)


def _comparison(field: str, value: Any) -> str:
    if not isinstance(value, dict):
        return f"{field} = {_literal(value)}"
    if len(value) != 1:
        return " and ".join(_comparison(field, {op: operand}) for op, operand in value.items())
    ((op, operand),) = value.items()
    if op == "$nin" and (not isinstance(operand, list) or not operand):
        raise InputError("where: $nin takes a non-empty list of values")
    if op in NEGATIONS:  # as Chroma: true where the positive test is false or unknown
        return f"({_comparison(field, {NEGATIONS[op]: operand})}) is not true"
    if op in OPERATORS:
        return f"{field} {OPERATORS[op]} {_literal(operand)}"
    if op == "$in":
        if not isinstance(operand, list) or not operand:
            raise InputError(f"where: {op} takes a non-empty list of values")
        return f"{field} in [{', '.join(_literal(v) for v in operand)}]"
    if op == "$contains":
        return f"{field} contains {_literal(operand)}"
    raise InputError(f"where: unknown operator {op!r} (use {', '.join([*OPERATORS, *MEMBERS])})")


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        problem = number_problem(value)  # before str(): an int of 5,000 digits is a ValueError there
        if problem is not None:
            raise InputError(f"where: a value {problem}")
        return str(value) if isinstance(value, int) else repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise InputError(f"where: a value is a string, a finite number or a boolean, not {_shown(value)}")


def _shown(value: Any) -> str:
    """A value in an error line: its repr where short (never the repr of a deep structure)."""
    if isinstance(value, (dict, list, tuple, set)):
        return "{}" if value == {} else type(value).__name__
    return repr(value)
