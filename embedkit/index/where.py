"""Metadata filters (`search --where EXPR`, `"where"` in /search): the language, parsed and checked once.

The grammar (lark, LALR; keywords are case-insensitive):

    expr       := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" expr ")" | "(" expr ")" "is" "not" "true" | comparison
    comparison := FIELD OP value | FIELD "in" "[" value ("," value)* "]"   (or "(" ... ")")
                | FIELD "contains" value
    OP         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    FIELD      := a name [A-Za-z_][A-Za-z0-9_.-]* or any name in backticks: `publication year`
    value      := NUMBER | "string" | 'string' | DATE | true | false
    DATE       := YYYY-MM-DD, optionally THH:MM[:SS[.fff]] and Z or +HH:MM (ISO 8601)

Fields are the top-level keys of the documents' metadata (a JSONL corpus's extra fields). Meaning:
- `=`, `!=`, `in` compare numbers with numbers, strings with strings, booleans with booleans, dates
  with dates; `<`, `<=`, `>`, `>=` compare numbers and dates (a quoted ISO date counts as a date).
  A date field is one whose text values start as ISO dates; dates compare as instants (SQLite's
  `julianday`), so 2024-01-05 and 2024-01-05T00:00:00Z are equal.
- A comparison is unknown for a document that lacks the field or holds another type there, and
  `not`, `and`, `or` follow SQL's three-valued logic: a document passes where the filter is true.
  So `lang != "en"` and `not lang = "en"` both leave out documents without `lang`, as in SQL and
  in Milvus (whose filter expressions `embedkit.remote.milvus.milvus_filter` writes).
  `(lang = "en") is not true` is SQL's two-valued negation: true where the part is false or
  unknown, so documents without `lang` pass (Chroma's `$ne` and `$nin`, `embedkit.index.where_dict`).
- `contains` tests a list's members: `tags contains "wing"` is true where `tags` is a list holding
  the string "wing" (a number equals a number, a boolean a boolean), false where it is a list
  without it, unknown where the field is no list. A list field is compared only so (`tags = "a"`
  is refused): what a document holds is searched as it is held.
- Numbers are exact (`exact_number`): an integer literal is a 64-bit int (beyond is refused, as
  the stores hold no more), a literal with a fraction a Decimal; `where_sql` compares integers
  with either exactly and floats with the literal's nearest float.
Checked against the fields the index holds before anything is searched: an unknown field, or a
value of a type the field never holds, is an `InputError` naming the position (1-based), as is
an expression that does not parse or goes past a stated limit (`MAX_CHARS`, `MAX_DEPTH`,
`MAX_COMPARISONS`, `MAX_IN_VALUES`; docs/guarantees.md, section 8).

`parse` gives the tree, `embedkit.index.where_fields.check` holds it against the index's fields;
`embedkit.index.where_sql.rows_where` turns it into SQL over the document
store (each search side then takes the allowed rows, `embedkit.index.rows` and
`embedkit.index.lexical`); adapters of other engines translate the same tree
(`embedkit.remote.milvus.milvus_filter`).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Union

from embedkit.data.values import INT64_MAX, INT64_MIN, check_text, in_int64, number_from_text, shown_number
from embedkit.errors import InputError

if TYPE_CHECKING:
    from lark import Lark, Token, Transformer_NonRecursive, Tree
    from lark.exceptions import UnexpectedInput

DATE_PATTERN = r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?"
GRAMMAR = r"""
?start: or_
?or_: and_ (_OR and_)*
?and_: not_ (_AND not_)*
?not_: negation
     | "(" or_ ")"
     | "(" or_ ")" _IS _NOT _TRUE -> untrue
     | comparison
negation: _NOT not_
comparison: field OP value -> compare
          | field _IN "[" value ("," value)* "]" -> member
          | field _IN "(" value ("," value)* ")" -> member
          | field _CONTAINS value -> contains
field: NAME | QUOTED_NAME
value: NUMBER -> number
     | STRING -> string
     | DATE -> date
     | _TRUE -> true
     | _FALSE -> false
_OR: "or"i
_AND: "and"i
_NOT: "not"i
_IN: "in"i
_IS: "is"i
_CONTAINS: "contains"i
_TRUE: "true"i
_FALSE: "false"i
OP: "==" | "=" | "!=" | "<=" | ">=" | "<" | ">"
DATE.3: /DATE_PATTERN/
NUMBER.2: /[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?/
STRING: /"([^"\\]|\\.)*"/ | /'([^'\\]|\\.)*'/
NAME: /[A-Za-z_][A-Za-z0-9_.-]*/
QUOTED_NAME: /`[^`]+`/
%ignore /\s+/
""".replace("DATE_PATTERN", DATE_PATTERN)
_DATE = re.compile(DATE_PATTERN)
_FRIENDLY = {
    "NAME": "a field",
    "QUOTED_NAME": "a field",
    "OP": "a comparison",
    "_IN": "in",
    "_IS": "is",
    "_CONTAINS": "contains",
    "NUMBER": "a value",
    "STRING": "a value",
    "DATE": "a value",
    "_TRUE": "a value",
    "_FALSE": "a value",
    "_AND": "and",
    "_OR": "or",
    "_NOT": "not",
    "LPAR": "(",
    "RPAR": ")",
    "LSQB": "[",
    "RSQB": "]",
    "COMMA": ",",
}
NUMERIC = ("integer", "real")  # `json_type` names of numbers
# A number with a fraction (`0.5`, `1e-3`) stays exact (a Decimal): documents' integers are compared
# with it exactly, their floats with its nearest float, as SQLite and Milvus hold them.
Value = Union[int, Decimal, str, bool, "Date"]

# The size of a filter, stated (docs/guarantees.md) rather than found as a RecursionError or as
# SQLite's "Expression tree is too large"; each is far beyond a filter a person writes.
MAX_CHARS = 100_000  # characters of the expression
MAX_DEPTH = 32  # levels of parentheses and `not` around a comparison
MAX_COMPARISONS = 1_000  # comparisons (each value of an `in` list is one)
MAX_IN_VALUES = 1_000  # values of one `in` list


@dataclass(frozen=True)
class Date:
    """An ISO 8601 date or date-time literal, as written."""

    text: str


@dataclass(frozen=True)
class Compare:
    field: str
    op: str  # =, !=, <, <=, >, >=
    value: Value
    position: int  # 1-based, of the field


@dataclass(frozen=True)
class Member:
    field: str
    values: tuple[Value, ...]
    position: int


@dataclass(frozen=True)
class Contains:
    """`field contains value`: a list field holding `value` among its members."""

    field: str
    value: Value
    position: int


@dataclass(frozen=True)
class Not:
    part: Expr
    # `(part) is not true`: true where the part is false or unknown (SQL's IS NOT TRUE), so a
    # document without the field passes, as Chroma's $ne, $nin and $not_contains keep it
    untrue: bool = False


@dataclass(frozen=True)
class And:
    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Expr, ...]


Expr = Union[Compare, Member, Contains, Not, And, Or]  # noqa: UP007 (a runtime alias: Python 3.10 has no `|` of strings)


@functools.cache
def _parser() -> Lark:  # built once per process
    from lark import Lark

    return Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


def parse(text: str) -> Expr:
    """The tree of `text`; an `InputError` naming the position where it stops making sense, or the
    limit (`MAX_CHARS`, `MAX_DEPTH`, `MAX_COMPARISONS`, `MAX_IN_VALUES`) it goes beyond."""
    from lark.exceptions import VisitError

    check_text(text, "the filter (where)")  # SQLite and the tokenizer write UTF-8
    if not text.strip():
        raise InputError('the filter (where) is empty: give one such as year >= 2020 and lang = "en"')
    if len(text) > MAX_CHARS:
        raise InputError(
            f"where: the expression has {len(text):,} characters; a filter takes at most {MAX_CHARS:,}"
        )
    tree = _syntax_tree(text)
    try:
        expr: Expr = _builder()().transform(tree)
    except VisitError as exc:  # a bad date or number, raised inside the transformer
        if isinstance(exc.orig_exc, InputError):
            raise exc.orig_exc from None
        raise
    check_size(expr)
    return expr


def _syntax_tree(text: str) -> Tree[Token]:
    """lark's parse of `text`; its errors as one line naming the position."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

    try:
        return _parser().parse(text)
    except UnexpectedEOF as exc:
        raise InputError(
            f"where: the expression ends early, at position {len(text) + 1}{_expected(exc)}"
        ) from None
    except UnexpectedCharacters as exc:
        at = exc.pos_in_stream or 0  # set for unexpected characters; lark's type allows None
        shown = text[at : at + 10]
        raise InputError(
            f"where: unexpected {shown!r} at position {at + 1}{_expected(exc)}"
        ) from None
    except UnexpectedToken as exc:
        if exc.token.type == "$END":
            raise InputError(
                f"where: the expression ends early, at position {len(text) + 1}{_expected(exc)}"
            ) from None
        where = (exc.token.start_pos or 0) + 1
        raise InputError(
            f"where: unexpected {str(exc.token)!r} at position {where}{_expected(exc)}"
        ) from None
    except UnexpectedInput as exc:  # pragma: no cover - the three above are lark's kinds
        raise InputError(f"where: cannot parse the expression: {exc}") from None


@functools.cache
def _builder() -> type[Transformer_NonRecursive[Token, Expr]]:  # syntax tree -> `Expr`
    from lark import Token, Transformer_NonRecursive, v_args

    @v_args(inline=True)
    # Transformer_NonRecursive: a loop, not recursion: any depth reaches `check_size`
    class Build(Transformer_NonRecursive[Token, Expr]):
        def field(self, token: Token) -> tuple[str, int]:
            name = token[1:-1] if token.type == "QUOTED_NAME" else str(token)
            return name, (token.start_pos or 0) + 1

        def number(self, token: Token) -> int | Decimal:
            return exact_number(str(token), (token.start_pos or 0) + 1)

        def string(self, token: Token) -> str:
            return re.sub(r"\\(.)", r"\1", token[1:-1])

        def date(self, token: Token) -> Date:
            _check_date(str(token), (token.start_pos or 0) + 1)
            return Date(str(token))

        def true(self) -> bool:
            return True

        def false(self) -> bool:
            return False

        def compare(self, field: tuple[str, int], op: Token, value: Value) -> Compare:
            return Compare(field[0], "=" if op == "==" else str(op), value, field[1])

        def member(self, field: tuple[str, int], *values: Value) -> Member:
            return Member(field[0], values, field[1])

        def contains(self, field: tuple[str, int], value: Value) -> Contains:
            return Contains(field[0], value, field[1])

        def negation(self, part: Expr) -> Not:
            return Not(part)

        def untrue(self, part: Expr) -> Not:
            return Not(part, untrue=True)

        def and_(self, *parts: Expr) -> And:
            return And(parts)

        def or_(self, *parts: Expr) -> Or:
            return Or(parts)

    return Build


def exact_number(token: str, position: int) -> int | Decimal:
    """A number literal as written: an int (64-bit, as the stores hold integers; beyond is an
    `InputError`), or a Decimal where it has a fraction, never a float that rounds it."""
    if re.fullmatch(r"[+-]?\d+", token):
        value = number_from_text(token)  # judged on its digits: no int() of 5,000 of them
        if not isinstance(value, int):
            raise InputError(
                f"where: the integer {shown_number(token)} at position {position} is beyond the 64-bit "
                f"integers the document store holds ({INT64_MIN} to {INT64_MAX})"
            )
        return value
    try:
        exact = Decimal(token)
        finite = math.isfinite(float(exact))
    except (InvalidOperation, OverflowError, ValueError):  # pragma: no cover - the grammar's NUMBER
        finite = False
    if not finite:
        raise InputError(
            f"where: the number {shown_number(token)} at position {position} is beyond 64-bit floats"
        )
    if exact == exact.to_integral_value() and in_int64(int(exact)):
        return int(exact)  # 2.0 and 2e3 are the integers they name
    return exact


def check_size(expr: Expr) -> None:
    """An `InputError` naming the limit a filter goes beyond (walked without recursion)."""
    comparisons = 0
    stack: list[tuple[Expr, int]] = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(
                f"where: the expression nests and, or and not over {MAX_DEPTH} levels deep; "
                f"a filter takes at most {MAX_DEPTH}"
            )
        if isinstance(node, Member) and len(node.values) > MAX_IN_VALUES:
            raise InputError(
                f"where: the `in` list at position {node.position} has {len(node.values):,} values; "
                f"a list takes at most {MAX_IN_VALUES:,}"
            )
        if isinstance(node, (Compare, Member, Contains)):
            comparisons += len(node.values) if isinstance(node, Member) else 1
            if comparisons > MAX_COMPARISONS:  # what bounds the SQL's parameters too
                raise InputError(
                    f"where: the expression has over {MAX_COMPARISONS:,} comparisons; a filter takes at "
                    f"most {MAX_COMPARISONS:,} (each value of an `in` list counts as one)"
                )
        elif isinstance(node, Not):
            stack.append((node.part, depth + 1))
        else:
            stack.extend((part, depth + 1) for part in node.parts)


def _expected(exc: UnexpectedInput) -> str:
    # lark 1.x: UnexpectedToken and UnexpectedEOF say what was `expected`, UnexpectedCharacters
    # (`allowed` instead) and their base UnexpectedInput do not
    names = sorted({_FRIENDLY.get(name, name.lower()) for name in getattr(exc, "expected", None) or ()})
    return f" (expected {' or '.join(names)})" if names else ""


def _check_date(text: str, position: int) -> None:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"where: {text!r} at position {position} is not a valid date") from None
