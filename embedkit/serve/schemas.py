"""The request and response bodies of the server's routes, as data: one definition for the checks and
for `/openapi.json`.

A request body is a `Body` of `Field`s. `Body.check` validates a parsed JSON object against them
(the one-line messages the API answers with, and the status: 422 for a wrong type or value, 413
for a list over the server's limit). Every field present is checked, `null` included: `null` is
a value of no field's type, so `{"input": null}` or `{"k": null}` is a 422 naming the field, as
an absent required field is; only a field declared `nullable` (TEI's `truncate`, an `Option` in
TEI) takes `null`, as its default. and `Body.schema` writes the same fields as JSON Schema (2020-12,
the dialect of OpenAPI 3.1). Limits that depend on the server's settings (`max_texts`, `max_k`)
are named by their `ServeConfig` attribute and read from the config in both. Response bodies are
JSON Schema written out here; the tests validate live responses against them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from embedkit.search.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS
from embedkit.search.request import SEARCH_MODES
from embedkit.serve.settings import ServeConfig

# Field kinds: what JSON a field takes.
TEXTS = "texts"  # a non-blank string or a non-empty list of them (OpenAI's `input`, TEI's `inputs`)
STRING = "string"
TEXT = "text"  # one non-blank string
BOOLEAN = "boolean"
INTEGER = "integer"
NUMBER = "number"


class BodyError(Exception):
    """A request body that does not fit its `Body`: answered with `status` (413 or 422)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    description: str
    default: Any = None  # None: no default (absent stays absent)
    choices: tuple[str, ...] = ()  # STRING: the values allowed
    minimum: float | None = None  # INTEGER / NUMBER
    maximum: float | str | None = None  # a number, or the ServeConfig attribute that holds it
    max_items: str | None = None  # TEXTS: the ServeConfig attribute limiting a list's length
    nullable: bool = False  # `null` means the default (as the reference API's optional field)

    def limit(self, config: ServeConfig) -> float | None:
        return getattr(config, self.maximum) if isinstance(self.maximum, str) else self.maximum

    def schema(self, config: ServeConfig) -> dict[str, Any]:
        text = {"type": "string", "pattern": r"\S"}  # not blank
        if self.kind == TEXTS:
            many = {"type": "array", "items": text, "minItems": 1}
            if self.max_items:
                many["maxItems"] = getattr(config, self.max_items)
            out: dict[str, Any] = {"oneOf": [text, many]}
        elif self.kind == TEXT:
            out = dict(text)
        else:
            out = {"type": [self.kind, "null"] if self.nullable else self.kind}
        if self.choices:
            out["enum"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.limit(config)
        if self.default is not None:
            out["default"] = self.default
        return {"description": self.description, **out}

    def check(self, value: Any, config: ServeConfig) -> Any:
        """`value` if it fits (TEXTS: as a list), else a `BodyError` naming the field."""
        name = self.name
        if self.kind == TEXTS:
            return check_texts(value, name, getattr(config, self.max_items) if self.max_items else None)
        if self.kind == TEXT:
            if not isinstance(value, str):
                raise BodyError(422, f"'{name}' must be a string, not {json_type(value)}", name)
            return check_texts(value, name, None)[0]
        if self.kind == BOOLEAN and not isinstance(value, bool):
            raise BodyError(422, f"'{name}' must be true or false, not {json_type(value)}", name)
        if self.kind == STRING:
            if not isinstance(value, str):
                raise BodyError(422, f"'{name}' must be a string, not {json_type(value)}", name)
            if self.choices and value not in self.choices:
                raise BodyError(
                    422, f"'{name}' must be one of {', '.join(self.choices)}, not {value!r}", name
                )
        if self.kind in (INTEGER, NUMBER):
            number = isinstance(value, int) or (self.kind == NUMBER and isinstance(value, float))
            low, high = self.minimum, self.limit(config)
            if (
                not number
                or isinstance(value, bool)
                or (low is not None and value < low)
                or (high is not None and value > high)
            ):
                what = "an integer" if self.kind == INTEGER else "a number"
                span = f" from {low:g}" if low is not None else ""
                span += f" to {high:g}" if high is not None else (" or more" if span else "")
                given = repr(value) if number and not isinstance(value, bool) else json_type(value)
                raise BodyError(422, f"'{name}' must be {what}{span}, not {given}", name)
        return value


@dataclass(frozen=True)
class Body:
    """A JSON object's fields; `one_of`: groups of which exactly one field must be given."""

    name: str
    fields: tuple[Field, ...]
    required: tuple[str, ...] = ()
    one_of: tuple[tuple[str, ...], ...] = ()
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # JSON Schema keywords beyond the fields'

    def check(self, body: dict[str, Any], config: ServeConfig) -> dict[str, Any]:
        """The fields' values (defaults filled in) or a `BodyError`. A key that is not a field is a
        422 naming it: a misspelled `k` answered as if absent is a wrong answer with no error. The
        OpenAI and TEI bodies list every field those APIs define, so their clients pass."""
        known = {spec.name for spec in self.fields}
        unknown = [key for key in body if key not in known]
        if unknown:
            names = ", ".join(repr(key) for key in unknown)
            raise BodyError(
                422,
                f"unknown field{'s' if len(unknown) > 1 else ''} {names}: this request takes "
                f"{', '.join(spec.name for spec in self.fields)}",
                unknown[0],
            )
        for group in self.one_of:
            if sum(name in body for name in group) != 1:
                raise BodyError(422, f"give exactly one of {', '.join(repr(n) for n in group)}")
        for name in self.required:
            if name not in body:
                raise BodyError(422, f"'{name}' is missing", name)
        values: dict[str, Any] = {}
        for spec in self.fields:
            if spec.name in body and not (spec.nullable and body[spec.name] is None):
                values[spec.name] = spec.check(body[spec.name], config)  # null is a wrong type
            elif spec.default is not None:
                values[spec.name] = spec.default
        return values

    def schema(self, config: ServeConfig) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "object",
            "properties": {f.name: f.schema(config) for f in self.fields},
            "additionalProperties": False,  # `check` refuses any other key
        }
        if self.description:
            out["description"] = self.description
        if self.required:
            out["required"] = list(self.required)
        if self.one_of:
            # exactly one of each group: a list of alternatives for one group, allOf for several
            groups = [{"oneOf": [{"required": [name]} for name in group]} for group in self.one_of]
            out.update(groups[0] if len(groups) == 1 else {"allOf": groups})
        return {**out, **self.extra}


def check_texts(value: Any, param: str, max_items: int | None) -> list[str]:
    """A string or list of non-blank strings, as a list; 413 for a list over `max_items`."""
    single = isinstance(value, str)
    if single:
        value = [value]
    elif not isinstance(value, list):
        raise BodyError(
            422, f"'{param}' must be a string or a list of strings, not {json_type(value)}", param
        )
    if not value:
        raise BodyError(422, f"'{param}' is an empty list", param)
    if max_items is not None and len(value) > max_items:
        raise BodyError(413, f"'{param}' has {len(value):,} texts; this server takes at most {max_items:,}")
    texts: list[str] = []
    for i, text in enumerate(value):
        where = f"'{param}'" if single else f"{param}[{i}]"
        if not isinstance(text, str):
            if _token_ids(text):
                raise BodyError(422, f"{where}: token ids are not accepted; send text", param)
            if isinstance(text, list):
                raise BodyError(
                    422,
                    f"{where} is a list: '{param}' must be a string or a list of strings, not nested lists",
                    param,
                )
            raise BodyError(422, f"{where} must be a string, not {json_type(text)}", param)
        if not text.strip():
            raise BodyError(422, f"{where} is an empty string", param)
        texts.append(text)
    return texts


def _token_ids(value: Any) -> bool:
    """An int, or a non-empty list of ints: what OpenAI's API takes as tokens."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


# ---- request bodies -------------------------------------------------------------------------

OPENAI_EMBEDDINGS = Body(
    "EmbeddingsRequest",
    (
        Field("input", TEXTS, "the text, or texts, to embed (token ids are refused)", max_items="max_texts"),
        Field("model", STRING, "accepted and ignored: the server has one model"),
        Field(
            "encoding_format",
            STRING,
            "vectors as float lists or base64 float32",
            "float",
            ("float", "base64"),
        ),
        Field("dimensions", INTEGER, "the first N dimensions, renormalized (1 to the model's)", minimum=1),
        Field("user", STRING, "accepted and ignored: an end user's id, for the provider's monitoring"),
    ),
    required=("input",),
    description="OpenAI's embeddings request (every field OpenAI defines)",
)
SEARCH = Body(
    "SearchRequest",
    (
        Field("query", TEXT, "one query"),
        Field("queries", TEXTS, "several queries (a list of strings)", max_items="max_texts"),
        Field("k", INTEGER, "hits per query", 10, minimum=1, maximum="max_k"),
        Field("mode", STRING, "dense, lexical or hybrid; absent: the index's default", choices=SEARCH_MODES),
        Field(
            "fusion",
            STRING,
            f"hybrid: how the two rankings are fused; absent: the index's calibrated choice, "
            f"else {DEFAULT_FUSION}",
            choices=FUSION_METHODS,
        ),
        Field(
            "alpha",
            NUMBER,
            f"hybrid: the dense side's weight; absent: the calibrated choice's, "
            f"or {DEFAULT_ALPHA} with a fusion",
            minimum=0,
            maximum=1,
        ),
        Field(
            "snippets",
            BOOLEAN,
            "give each hit a snippet: the part of its text that best answers the query, one line, "
            "the query's words highlighted (false: none)",
            True,
        ),
        Field(
            "include",
            TEXTS,
            "a hit's fields besides rank, id and score, of title, text, metadata, snippet, passage, "
            "scores; absent: all but text (the whole document)",
        ),
        Field("where", STRING, 'metadata filter, as `search --where`: year >= 2020 and lang = "en"'),
        Field("passages", BOOLEAN, "give each hit its best passage (an index built with passages)", False),
        Field(
            "model",
            STRING,
            "the served model whose index to search (serve --index A --index B); absent: the first",
        ),
        Field(
            "rerank_depth",
            INTEGER,
            "re-rank each query's first N hits with the server's cross-encoder (serve --rerank); "
            "absent: no re-ranking",
            minimum=1,
            maximum="max_k",
        ),
    ),
    one_of=(("query", "queries"),),
    description="a search of the server's index",
)
TRUNCATION_DIRECTION = Field(  # TEI's, in /embed and /rerank
    "truncation_direction",
    STRING,
    "where truncate cuts: this server cuts the end (right)",
    "right",
    ("right", "Right", "left", "Left"),
)
TEI_EMBED = Body(
    "TeiEmbedRequest",
    (
        Field("inputs", TEXTS, "the text, or texts, to embed", max_items="max_texts"),
        Field("normalize", BOOLEAN, "L2-normalize the vectors", True),
        Field("truncate", BOOLEAN, "cut texts longer than max_input_length (else 413)", False, nullable=True),
        TRUNCATION_DIRECTION,
        Field(
            "prompt_name",
            STRING,
            "a key of the model's sentence-transformers prompts, put before every input",
            nullable=True,
        ),
        Field(
            "dimensions",
            INTEGER,
            "the first N dimensions (1 to the model's), then normalized",
            minimum=1,
            nullable=True,
        ),
    ),
    required=("inputs",),
    description="text-embeddings-inference's /embed request (every field TEI defines)",
)
TEI_RERANK = Body(
    "TeiRerankRequest",
    (
        Field("query", TEXT, "the query the texts are scored against"),
        Field("texts", TEXTS, "the texts to score", max_items="max_texts"),
        Field("truncate", BOOLEAN, "cut pairs longer than max_input_length (else 413)", False, nullable=True),
        TRUNCATION_DIRECTION,
        Field("raw_scores", BOOLEAN, "the model's logits, without its activation (the sigmoid)", False),
        Field("return_text", BOOLEAN, "give each rank its text", False),
    ),
    required=("query", "texts"),
    description="text-embeddings-inference's /rerank request (every field TEI defines)",
)
REQUESTS: Sequence[Body] = (OPENAI_EMBEDDINGS, SEARCH, TEI_EMBED, TEI_RERANK)
