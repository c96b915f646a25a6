"""A metadata filter (`embedkit.index.where`'s tree) as SQL over the document store's JSON metadata.

Each comparison is NULL (unknown) for a document that lacks the field or holds another type there,
so `not`, `and` and `or` follow SQL's three-valued logic and only documents for which the filter is
true pass. The SQL stays shallow whatever the filter's size and shape: each level of `and`, `or`
and `not` a layer of its own (`filter_query`: SQLite's parser overflows on about 30 nested
parentheses), `and`/`or` of many parts as a balanced tree, an `in` list as SQL's `IN` (SQLite
refuses an expression tree over 1,000 levels deep).
Numbers: integers compare exactly (SQLite compares integers with integers and floats exactly), a
literal with a fraction becomes, for integers, the integer bound it implies (`_number_sql`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from embedkit.data.values import INT64_MAX, INT64_MIN
from embedkit.index.where import (
    And,
    Compare,
    Contains,
    Date,
    Expr,
    Member,
    Not,
    Or,
    Value,
    parse,
)
from embedkit.index.where_fields import check, compared_as

if TYPE_CHECKING:
    import numpy as np

    from embedkit.index.docstore import DocStore


def rows_where(store: DocStore, text: str) -> np.ndarray:
    """The rows of the documents in `store` that pass the filter `text` (sorted int64)."""
    expr = parse(text)
    fields = store.filters.fields()
    check(expr, fields)
    params: list[object] = []
    return store.filters.rows_matching(filter_query(expr, fields, params), params)


def json_path(field: str) -> str:
    """SQLite's JSON path of a top-level key (quoted, so any key works)."""
    return '$."' + field.replace("\\", "\\\\").replace('"', '\\"') + '"'


def filter_query(expr: Expr, fields: dict[str, set[str]], params: list[object]) -> str:
    """A SELECT of the `row` of each document that passes `expr`, its SQL as shallow whatever
    the filter's depth: SQLite's parser holds at most 100 open terms, and `a or (b and (c or ...))`
    nested 30 deep overflows it. So each level of `and`, `or` and `not` is a layer of its own (a
    common table expression over the one below, whose columns are the parts' truth values: 1, 0
    or NULL, SQL's three-valued logic as before); a layer nests only its balanced `and`/`or`
    (log2 of 1,000 comparisons: 10 levels) and a comparison's CASE."""
    layers: list[list[tuple[str, str]]] = []  # layers[h]: (sql, column) of nodes h above a comparison
    read_at: dict[str, int] = {}  # column -> the layer of the node that reads it

    def column(node: Expr) -> tuple[str, int]:  # (its column, its layer)
        if isinstance(node, (Compare, Member, Contains)):
            sql, height = _comparison_sql(node, fields, params), 0  # params in the order of the text
        else:
            parts = [column(part) for part in (node.parts if isinstance(node, (And, Or)) else (node.part,))]
            height = 1 + max(h for _, h in parts)
            names = [name for name, _ in parts]
            read_at.update((name, height) for name in names)
            if isinstance(node, Not):  # `(expr) is not true` is two-valued: unknown counts as not true
                sql = f"({names[0]} IS NOT 1)" if node.untrue else f"NOT {names[0]}"
            else:
                sql = _balanced(names, node)
        while len(layers) <= height:
            layers.append([])
        name = f"n{sum(map(len, layers))}"
        layers[height].append((sql, name))
        return name, height

    root, top = column(expr)
    if top == 0:  # one comparison: no layers
        return f"SELECT row FROM documents WHERE {layers[0][0][0]}"
    made_at = {name: height for height, entries in enumerate(layers) for _, name in entries}
    tables = []
    for height, entries in enumerate(layers):
        # a column goes up through each layer between the one that makes it and the one that reads it
        carried = [name for name, made in made_at.items() if made < height < read_at.get(name, 0)]
        columns = [*carried, *(f"{sql} AS {name}" for sql, name in entries)]
        source = "documents" if height == 0 else f"layer{height - 1}"
        tables.append(f"layer{height} AS (SELECT row, {', '.join(columns)} FROM {source})")
    return f"WITH {', '.join(tables)} SELECT row FROM layer{top} WHERE {root}"


def _comparison_sql(
    expr: Compare | Member | Contains, fields: dict[str, set[str]], params: list[Any]
) -> str:
    if isinstance(expr, Member):
        return _member_sql(expr, fields[expr.field], params)
    if isinstance(expr, Contains):
        return _contains_sql(expr, params)
    return _compare_sql(expr, compared_as(expr.value, expr.op, fields[expr.field]), params)


def _balanced(parts: list[str], expr: And | Or) -> str:
    """`parts` joined by AND or OR as a balanced tree: SQLite nests `a AND b AND c ...` one level a
    term, and refuses an expression over 1,000 levels deep."""
    if len(parts) == 1:
        return parts[0]
    joiner = " AND " if isinstance(expr, And) else " OR "
    middle = len(parts) // 2
    return f"({_balanced(parts[:middle], expr)}{joiner}{_balanced(parts[middle:], expr)})"


_OF_TYPE = {
    "bool": "json_type(metadata, ?) IN ('true', 'false')",
    "string": "json_type(metadata, ?) = 'text'",
}
_VALUE = "json_extract(metadata, ?)"


def _compare_sql(expr: Compare, kind: str, params: list[object]) -> str:
    """One comparison: NULL (unknown) where the field is missing or of another type, so that `not`,
    `and` and `or` follow SQL's three-valued logic and only documents for which it is true pass."""
    path = json_path(expr.field)
    op = "<>" if expr.op == "!=" else expr.op
    if kind == "number":
        return _number_sql(path, op, [expr.value], params)
    if kind == "bool":
        params += [path, path, "true" if expr.value else "false"]
        return f"(CASE WHEN {_OF_TYPE['bool']} THEN json_type(metadata, ?) {op} ? END)"
    if kind == "date":
        return _date_sql(path, f"{op} julianday(?)", [expr.value], params)
    params += [path, path, expr.value]
    return f"(CASE WHEN {_OF_TYPE['string']} THEN {_VALUE} {op} ? END)"


def _member_sql(expr: Member, types: set[str], params: list[object]) -> str:
    """`field in (...)` as SQL's IN for each kind of value in the list (one level deep, however long)."""
    path = json_path(expr.field)
    by_kind: dict[str, list[Value]] = {}
    for value in expr.values:
        by_kind.setdefault(compared_as(value, "=", types), []).append(value)
    parts = []
    for kind, values in by_kind.items():
        marks = ", ".join("?" * len(values))
        if kind == "number":
            parts.append(_number_sql(path, "IN", values, params))
        elif kind == "date":
            parts.append(_date_sql(path, f"IN ({', '.join(['julianday(?)'] * len(values))})", values, params))
        elif kind == "bool":
            params += [path, path, *("true" if v else "false" for v in values)]
            parts.append(f"(CASE WHEN {_OF_TYPE['bool']} THEN json_type(metadata, ?) IN ({marks}) END)")
        else:
            params += [path, path, *values]
            parts.append(f"(CASE WHEN {_OF_TYPE['string']} THEN {_VALUE} IN ({marks}) END)")
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def _contains_sql(expr: Contains, params: list[object]) -> str:
    """`field contains value`: NULL (unknown) where the field is no list, else whether a member of
    the list equals `value`, of the same kind (numbers: an integer exactly, a fraction as its
    nearest float; a date literal as its text)."""
    path = json_path(expr.field)
    value = expr.value
    operand: int | float | str
    if isinstance(value, bool):
        test, operand = "m.type = ?", "true" if value else "false"
    elif isinstance(value, (int, Decimal)):
        test, operand = (
            "m.type IN ('integer', 'real') AND m.value = ?",
            value if isinstance(value, int) else float(value),
        )
    else:
        test, operand = "m.type = 'text' AND m.value = ?", value.text if isinstance(value, Date) else value
    params += [path, path, operand]
    member = f"EXISTS (SELECT 1 FROM json_each(metadata, ?) AS m WHERE {test})"
    return f"(CASE WHEN json_type(metadata, ?) = 'array' THEN {member} END)"


def _date_sql(path: str, test: str, values: list[Value], params: list[object]) -> str:
    from embedkit.index.fields import ISO_DATE_GLOB

    literals = [v.text if isinstance(v, Date) else str(v) for v in values]
    params += [path, path, ISO_DATE_GLOB, path, *literals]
    dated = f"json_type(metadata, ?) = 'text' AND {_VALUE} GLOB ?"
    return f"(CASE WHEN {dated} THEN julianday({_VALUE}) {test} END)"


def _number_sql(path: str, op: str, values: list[Value], params: list[object]) -> str:
    """A number comparison (`op` IN: membership of `values`) that is exact for the documents'
    integers: SQLite compares an integer with an integer or a float exactly, and a literal with a
    fraction is turned, for integers, into the integer bound it implies (`v < 2.5` is `v <= 2`),
    never rounded to a float first. Documents' floats compare with the literal's nearest float."""
    if all(isinstance(v, int) for v in values):
        marks = ", ".join("?" * len(values))
        params += [path, path, *values]
        test = f"IN ({marks})" if op == "IN" else f"{op} ?"
        return f"(CASE WHEN json_type(metadata, ?) IN ('integer', 'real') THEN {_VALUE} {test} END)"
    numbers = cast("list[int | Decimal]", values)  # `compared_as` said number: ints and Decimals
    floats = [v if isinstance(v, int) else float(v) for v in numbers]  # integers stay exact
    params.append(path)  # the CASE's json_type, then each branch's own
    if op == "IN":
        whole = [v for v in values if isinstance(v, int)]
        integer = f"{_VALUE} IN ({', '.join('?' * len(whole))})" if whole else "0"
        params += [path, *whole] if whole else []
        real = f"{_VALUE} IN ({', '.join('?' * len(floats))})"
    else:
        integer = _integer_bound(path, op, Decimal(numbers[0]), params)
        real = f"{_VALUE} {op} ?"
    params += [path, *floats]
    return f"(CASE json_type(metadata, ?) WHEN 'integer' THEN {integer} WHEN 'real' THEN {real} END)"


def _integer_bound(path: str, op: str, value: Decimal, params: list[object]) -> str:
    """`integer op value` for a `value` that no 64-bit integer equals, as exact integer SQL."""
    if op in ("=", "<>"):
        return "0" if op == "=" else "1"
    below = op in ("<", "<=")
    bound = math.floor(value) if below else math.ceil(value)
    if bound > INT64_MAX:
        return "1" if below else "0"
    if bound < INT64_MIN:
        return "0" if below else "1"
    params += [path, bound]
    return f"{_VALUE} {'<=' if below else '>='} ?"
