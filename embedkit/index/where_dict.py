"""Chroma's `where` filters (`{"year": {"$gte": 2020}}`) as embedkit's filter expressions.

A user of Chroma writes a metadata filter as a dict; `expression_of` writes the same filter in the
language of `embedkit.index.where` (`year >= 2020`), which then parses and checks it as any
`--where`. Supported: `{"field": value}` (equality), `{"field": {"$op": value}}` with `$eq`,
`$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in`, `$nin`, and `{"$and": [...]}`, `{"$or": [...]}`;
several keys in one dict are joined by `and`, as in Chroma. Values: strings, numbers, booleans.
As every embedkit filter, a comparison is unknown for a document without the field, so `$ne` and
`$nin` leave such documents out (SQL's logic; `embedkit.index.where`).
"""

from __future__ import annotations

from typing import Any

from embedkit.data.values import number_problem
from embedkit.errors import InputError

OPERATORS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
JOINS = {"$and": "and", "$or": "or"}


def expression_of(where: Any) -> str:
    """The filter expression that says what the dict `where` says; an `InputError` for a dict
    this translation does not know (naming the key)."""
    if not isinstance(where, dict) or not where:
        raise InputError(f"where: a filter is a non-empty dict or an expression string, not {where!r}")
    parts = []
    for key, value in where.items():
        if key in JOINS:
            if not isinstance(value, list) or not value:
                raise InputError(f"where: {key} takes a non-empty list of filters")
            parts.append("(" + f" {JOINS[key]} ".join(f"({expression_of(v)})" for v in value) + ")")
        elif not isinstance(key, str) or key.startswith("$") or "`" in key or not key:
            known = ", ".join([*JOINS, *OPERATORS, "$in", "$nin"])
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
    if op in OPERATORS:
        return f"{field} {OPERATORS[op]} {_literal(operand)}"
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand:
            raise InputError(f"where: {op} takes a non-empty list of values")
        member = f"{field} in [{', '.join(_literal(v) for v in operand)}]"
        return member if op == "$in" else f"not {member}"
    raise InputError(f"where: unknown operator {op!r} (use {', '.join(OPERATORS)}, $in, $nin)")


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
    raise InputError(f"where: a value is a string, a finite number or a boolean, not {value!r}")
