"""Long documents split into passages: windows of the model's tokens, searched by their best passage.

An index built with `--passages N[:OVERLAP]` holds one vector (and one BM25 entry) per passage
instead of one per document. A document's text is tokenized with the model's own tokenizer (no
special tokens, no truncation) and cut into windows of `N` tokens, each starting `N - OVERLAP`
tokens after the previous one, the last ending at the text's last token (`token_windows`); a
document of at most `N` tokens is one passage, its whole text, so short documents are embedded
exactly as without passages. A passage is the character span of its tokens in the text (the first
from the text's start, the last to its end), so every character of the text is in a passage and
snippets quote the user's text. The title, when there is one, is prepended to every passage (as
DPR and BEIR embed "title + passage"), so `N` plus the title's tokens should stay within the
model's `max_seq_length` (all-MiniLM-L6-v2: 256); an `N` over it is refused, and a passage that
its title and special tokens take past it is truncated and counted.

Search ranks documents by their best passage: a document's dense score is the largest cosine of
its passages, its BM25 score the largest of its passages', and hybrid fusion combines those
document scores (`embedkit.search.pipeline`). The setting is recorded in the index metadata
(`PassageSettings.to_json`), so an append splits new documents the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from embedkit.data.document import Document, Passage
from embedkit.errors import InputError


@dataclass(frozen=True)
class PassageSettings:
    """Passages of `tokens` model tokens, consecutive ones sharing `overlap` tokens."""

    tokens: int
    overlap: int = 0
    unit: str = "model-tokens"  # recorded: windows count the index model's tokenizer's tokens

    def __post_init__(self) -> None:
        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or self.tokens < 1:
            raise InputError(
                f"--passages: the passage length must be a whole number >= 1, got {self.tokens!r}"
            )
        if not isinstance(self.overlap, int) or isinstance(self.overlap, bool) or self.overlap < 0:
            raise InputError(f"--passages: the overlap must be a whole number >= 0, got {self.overlap!r}")
        if self.overlap >= self.tokens:
            raise InputError(
                f"--passages {self.tokens}:{self.overlap}: the overlap must be below the passage length"
            )
        if self.unit != "model-tokens":
            raise InputError(f"unknown passage unit {self.unit!r}")

    @classmethod
    def parse(cls, text: str) -> PassageSettings:
        """`N` or `N:OVERLAP` (tokens), as `embedkit index --passages` takes it."""
        size, _, overlap = text.strip().partition(":")
        try:
            numbers = int(size), int(overlap) if overlap else 0
        except ValueError:
            raise InputError(f"--passages takes N or N:OVERLAP (tokens, e.g. 128:32), got {text!r}") from None
        return cls(*numbers)

    def describe(self) -> str:
        return f"{self.tokens}:{self.overlap}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PassageSettings:
        if not isinstance(data, dict) or set(data) - {"tokens", "overlap", "unit"} or "tokens" not in data:
            raise InputError(f"passage settings must be an object with tokens and overlap, got {data!r}")
        return cls(**data)


def passage_settings(
    passages: PassageSettings | str | None, old: dict[str, Any] | None
) -> PassageSettings | None:
    """The passages of a new index as asked; an append keeps the index's (another one asked is an error)."""
    asked = PassageSettings.parse(passages) if isinstance(passages, str) else passages
    if old is None:
        return asked
    recorded = PassageSettings.from_json(old["passages"]) if old.get("passages") else None
    if asked is not None and asked != recorded:
        kept = f"passages {recorded.describe()}" if recorded else "whole documents"
        raise InputError(f"--passages {asked.describe()} differs from the index's {kept}; an append keeps it")
    return recorded


def token_windows(count: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) token ranges of the windows over `count` tokens (see the module docstring).

    >>> token_windows(10, 4, 1)
    [(0, 4), (3, 7), (6, 10)]
    """
    if count <= size:
        return [(0, count)]
    step = size - overlap
    windows = []
    start = 0
    while start + size < count:
        windows.append((start, start + size))
        start += step
    windows.append((start, count))  # the last window ends at the last token: no empty tail
    return windows


def fitting_passages(model_dir: str | Path, titles: Iterable[str]) -> PassageSettings | None:
    """The longest passages a model takes whole with the longest of `titles` before each and its
    special tokens around them, overlapping by a quarter: the `--passages` an index of whole
    documents advises when some were cut. None when the titles leave too little room for one."""
    from embedkit.encode.batching import load_tokenizer
    from embedkit.encode.model_folder import read_model_spec

    longest = read_model_spec(model_dir).max_seq_length
    tokenizer = load_tokenizer(Path(model_dir), longest)
    tokenizer.no_truncation()
    specials = len(tokenizer.encode("", add_special_tokens=True).ids)
    title_tokens, batch = 0, []
    for title in [*titles, None]:  # None: the end, the last batch measured
        if title:
            batch.append(title)
        if batch and (title is None or len(batch) >= 1024):
            encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
            title_tokens = max(title_tokens, *(len(e.ids) for e in encodings))
            batch = []
    tokens = longest - specials - title_tokens
    return PassageSettings(tokens, tokens // 4) if tokens >= 16 else None


class PassageSplitter:
    """Splits documents into passages with a model folder's tokenizer."""

    def __init__(self, model_dir: str | Path, settings: PassageSettings) -> None:
        from embedkit.encode.batching import load_tokenizer
        from embedkit.encode.model_folder import read_model_spec

        longest = read_model_spec(model_dir).max_seq_length
        if settings.tokens > longest:  # every longer passage would lose its tail to truncation
            raise InputError(
                f"--passages {settings.describe()}: a passage of {settings.tokens:,} tokens is longer than "
                f"the model takes ({longest} tokens, {model_dir}): give at most {longest}"
            )
        self.settings = settings
        self.tokenizer = load_tokenizer(Path(model_dir), settings.tokens)
        self.tokenizer.no_truncation()  # every token of the text, however long

    def split(self, documents: Sequence[Document]) -> list[Passage]:
        """The passages of `documents`, in order (a document's passages together, first to last)."""
        encodings = self.tokenizer.encode_batch([doc.text for doc in documents], add_special_tokens=False)
        passages: list[Passage] = []
        for doc, encoding in zip(documents, encodings, strict=True):
            # offsets of tokens a normaliser made out of nothing can be (0, 0): keep real ones only
            offsets = [(s, e) for s, e in encoding.offsets if e > s]
            windows = token_windows(len(offsets), self.settings.tokens, self.settings.overlap)
            last = len(windows) - 1
            for number, (first, end) in enumerate(windows):
                start = 0 if number == 0 else offsets[first][0]
                stop = len(doc.text) if number == last else offsets[end - 1][1]
                passages.append(Passage(doc, number, start, stop))
        return passages

    def passages(self, documents: Iterable[Document], batch: int = 1000) -> Iterator[Passage]:
        """Stream the passages of a stream of documents (tokenized `batch` documents at a time)."""
        chunk: list[Document] = []
        for doc in documents:
            chunk.append(doc)
            if len(chunk) == batch:
                yield from self.split(chunk)
                chunk = []
        if chunk:
            yield from self.split(chunk)
