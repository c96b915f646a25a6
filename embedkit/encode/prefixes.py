"""Query and passage prefixes: the text some models expect before what they embed.

e5 models are trained on "query: ..." and "passage: ..." inputs, bge models on queries that begin
with an instruction ("Represent this sentence for searching relevant passages: "), nomic-embed on
"search_query: " / "search_document: ". Embedded without them, such a model loses quality with no
error. An index records the two prefixes it was built with (`IndexMeta.query_prefix`,
`passage_prefix`), and every command that embeds for it (search, serve, eval, append, adapt's
re-embed) puts them before queries and documents; the lexical side never sees them.

Where no prefix is given, `detect_prefixes` reads the model folder: first the prompts that
sentence-transformers records in `config_sentence_transformers.json` ("prompts": {"query": ...,
"document", "passage" or "corpus": ...}), chosen as its `encode_query` and `encode_document`
choose them (`prompt_prefixes`); then the model card (`README.md`), where
the families above state theirs in the words matched by `_CARD_PATTERNS`. Prefixes given
explicitly always win. `embedkit export` copies both files, so an ONNX folder states its source's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.errors import InputError

# (family, what the card says, query prefix, passage prefix): the cards' own words, matched exactly
_CARD_PATTERNS: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    # intfloat/e5-*: 'Each input text should start with "query: " or "passage: "'
    ("e5", re.compile(r"""["'`]query: ["'`].{0,80}?["'`]passage: ["'`]""", re.S), "query: ", "passage: "),
    # BAAI/bge-*-en(-v1.5): the query instruction for retrieval; passages go in bare
    (
        "bge",
        re.compile(r"Represent this sentence for searching relevant passages: "),
        "Represent this sentence for searching relevant passages: ",
        "",
    ),
    (
        "bge-zh",
        re.compile(r"为这个句子生成表示以用于检索相关文章："),
        "为这个句子生成表示以用于检索相关文章：",
        "",
    ),
    # nomic-ai/nomic-embed-text-*: task prefixes
    (
        "nomic",
        re.compile(r"search_query: .{0,400}?search_document: ", re.S),
        "search_query: ",
        "search_document: ",
    ),
)
_PASSAGE_PROMPTS = ("document", "passage", "corpus")  # sentence-transformers' order of preference


@dataclass(frozen=True)
class Prefixes:
    """The text put before queries and before documents (or passages) when they are embedded."""

    query: str = ""
    passage: str = ""
    source: str = (
        "none"  # "given", "config_sentence_transformers.json", "README.md (e5)", "none", "the index"
    )

    def queries(self, texts: list[str]) -> list[str]:
        return [self.query + t for t in texts] if self.query else texts

    def passages(self, texts: list[str]) -> list[str]:
        return [self.passage + t for t in texts] if self.passage else texts

    def describe(self) -> str:
        if not (self.query or self.passage):
            return "no prefixes"
        return f"query prefix {self.query!r}, passage prefix {self.passage!r} ({self.source})"


def model_prompts(model_dir: str | Path) -> dict[str, str]:
    """The prompts sentence-transformers records in the folder (name -> text); {} where none."""
    config = Path(model_dir) / "config_sentence_transformers.json"
    if not config.is_file():
        return {}
    try:
        prompts = json.loads(config.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(prompts, dict):
        return {}
    return {str(name): text for name, text in prompts.items() if isinstance(text, str)}


def detect_prefixes(model_dir: str | Path) -> Prefixes:
    """The prefixes the model folder states (see the module docstring); empty ones where it states none."""
    folder = Path(model_dir)
    config = folder / "config_sentence_transformers.json"
    found = prompt_prefixes(folder) if config.is_file() else None
    if found is not None:
        return found
    card = folder / "README.md"
    if card.is_file():
        try:
            text = card.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for family, pattern, query, passage in _CARD_PATTERNS:
            if pattern.search(text):
                return Prefixes(query, passage, f"README.md ({family})")
    return Prefixes()


def prompt_prefixes(model_dir: str | Path) -> Prefixes | None:
    """The prompts sentence-transformers' `encode_query` and `encode_document` put before texts.

    The "query" prompt for queries and the "document" one for documents, as sentence-transformers 6
    chooses them; where a folder names its document prompt "passage" or "corpus" instead (e5's
    convention), that one, the prompt its model was trained with for documents. The default
    prompt (`default_prompt_name`) is not used: sentence-transformers adds it only in a plain
    `encode`, never for a query or a document. None where neither side has a non-empty prompt.
    """
    prompts = model_prompts(model_dir)
    query = prompts.get("query", "")
    passage = next((prompts[name] for name in _PASSAGE_PROMPTS if name in prompts), "")
    source = "config_sentence_transformers.json"
    return Prefixes(query, passage, source) if query or passage else None


def resolve_prefixes(model_dir: str | Path | None, query: str | None, passage: str | None) -> Prefixes:
    """The prefixes for a new index: each one given wins, the other comes from the model folder."""
    for name, value in (("--query-prefix", query), ("--passage-prefix", passage)):
        if value is not None and ("\n" in value or "\r" in value):
            raise InputError(f"{name} must be one line, got {value!r}")
        if value:
            from embedkit.data.values import check_text

            check_text(value, name)  # recorded, then put before every text embedded for the index
            if model_dir is not None:
                _check_room(model_dir, name, value)
    if query is not None and passage is not None:
        return Prefixes(query, passage, "given")
    found = detect_prefixes(model_dir) if model_dir is not None else Prefixes()
    if query is None and passage is None:
        return found
    source = "given" if not (found.query or found.passage) else f"given, and {found.source}"
    return Prefixes(
        found.query if query is None else query, found.passage if passage is None else passage, source
    )


def _check_room(model_dir: str | Path, name: str, prefix: str) -> None:
    """An `InputError` for a prefix that leaves the model no room for the text it comes before."""
    from embedkit.encode.batching import load_tokenizer
    from embedkit.encode.model_folder import read_model_spec

    spec = read_model_spec(model_dir)
    tokenizer = load_tokenizer(spec.path, spec.max_seq_length)
    tokenizer.no_truncation()
    used = len(tokenizer.encode(prefix, add_special_tokens=False).ids)
    room = spec.max_seq_length - 2  # [CLS] and [SEP], or the model's own two
    if used >= room:
        raise InputError(
            f"{name} is {used:,} tokens long, and the model takes {spec.max_seq_length}: no room is left "
            "for the text after it"
        )


def check_recorded(recorded: Prefixes, query: str | None, passage: str | None, what: str) -> None:
    """An append or re-embed keeps the index's prefixes: a different one given is an `InputError`."""
    for name, given, kept in (
        ("--query-prefix", query, recorded.query),
        ("--passage-prefix", passage, recorded.passage),
    ):
        if given is not None and given != kept:
            raise InputError(f"{name} {given!r} differs from the {what}'s {kept!r}; it keeps its own")


def recorded_prefixes(meta: dict[str, Any]) -> Prefixes:
    """The prefixes an index's metadata records (none for an index from before prefixes)."""
    return Prefixes(str(meta.get("query_prefix") or ""), str(meta.get("passage_prefix") or ""), "the index")
