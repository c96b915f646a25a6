"""Text analysis and settings of the BM25 lexical index (`embedkit.index.lexical`).

The same analysis for documents and queries: NFKC, casefold, split into words (runs of Unicode
letters, digits and combining marks; each Han, Hiragana or Katakana character a word of its own,
as Lucene's StandardTokenizer emits CJK ideographs), drop Lucene's English stopwords, stem with
Snowball's English (Porter2) stemmer (`snowballstemmer`, which uses PyStemmer when installed).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from embedkit.errors import InputError

FORMAT_VERSION = 1
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, the stop set of Anserini's BM25 baselines.
_LUCENE_STOP = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
)
LUCENE_ENGLISH_STOPWORDS = frozenset(_LUCENE_STOP.split())
STOPWORD_LISTS: dict[str, frozenset[str]] = {"lucene-english": LUCENE_ENGLISH_STOPWORDS, "none": frozenset()}
STEMMERS = ("english", "porter", "none")  # Snowball algorithms: Porter2 (English), original Porter
# Han (CJK Unified Ideographs and extensions, compatibility ideographs), Hiragana, Katakana.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
_STEM_CACHE_MAX = 1_000_000


@dataclass(frozen=True)
class LexicalSettings:
    """How the lexical index analyses and scores text; stored in the index, read back at search.

    `stopwords`: "lucene-english" or "none"; `stemmer`: "english" (Snowball Porter2), "porter"
    (Porter 1980) or "none"; `k1`, `b`: BM25's parameters (Lucene's defaults).
    """

    stopwords: str = "lucene-english"
    stemmer: str = "english"
    k1: float = 1.2
    b: float = 0.75
    idf: str = "lucene"  # ln(1 + (N - n + 0.5) / (n + 0.5)); recorded, the only one
    tokenizer: str = "unicode-words"  # the split of the module docstring; recorded, the only one
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.stopwords not in STOPWORD_LISTS:
            raise InputError(f"unknown stopword list {self.stopwords!r}: use {', '.join(STOPWORD_LISTS)}")
        if self.stemmer not in STEMMERS:
            raise InputError(f"unknown stemmer {self.stemmer!r}: use {', '.join(STEMMERS)}")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (self.k1, self.b))
        if not (numbers and math.isfinite(self.k1) and self.k1 >= 0 and 0 <= self.b <= 1):
            raise InputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        if (self.idf, self.tokenizer) != ("lucene", "unicode-words"):
            raise InputError(f"unknown lexical idf {self.idf!r} or tokenizer {self.tokenizer!r}")
        if self.version != FORMAT_VERSION:
            raise InputError(f"lexical index format {self.version}; this embedkit reads {FORMAT_VERSION}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> LexicalSettings:
        """Settings from `to_json`'s dict; unknown keys or values are an `InputError`."""
        if not isinstance(data, dict):
            raise InputError(f"lexical settings must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise InputError(f"unknown lexical settings: {', '.join(sorted(unknown))}")
        return cls(**data)


# --- analysis ------------------------------------------------------------------------------------


@cache
def _word_pattern() -> re.Pattern[str]:
    """One CJK character, or a run of letters, digits and combining marks.

    Python's `\\w` has no combining marks (Devanagari vowel signs, Arabic harakat), which would
    cut words apart, so their ranges are collected once from `unicodedata` (none lie between
    U+20000 and U+E0000).
    """
    ranges: list[tuple[int, int]] = []
    for code in (*range(0x20000), *range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(code))[0] == "M":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    marks = "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b != a else "") for a, b in ranges)
    return re.compile(f"[{_CJK}]|(?:[^\\W_{_CJK}]|[{marks}])+")


_stem_caches: dict[str, dict[str, str]] = {}


def _stems(words: set[str], stemmer: str) -> dict[str, str]:
    """word -> stem for `words`, through a per-process cache (a corpus's vocabulary repeats)."""
    if stemmer == "none":
        return {word: word for word in words}
    known = _stem_caches.setdefault(stemmer, {})
    if len(known) + len(words) > _STEM_CACHE_MAX:
        known.clear()
    new = [word for word in words if word not in known]
    if new:
        import snowballstemmer

        known.update(zip(new, snowballstemmer.stemmer(stemmer).stemWords(new), strict=True))
    return known


def analyze_many(texts: Sequence[str], settings: LexicalSettings | None = None) -> list[list[str]]:
    """The terms of each text, in order: the analysis of the module docstring."""
    settings = settings or LexicalSettings()
    stopwords = STOPWORD_LISTS[settings.stopwords]
    pattern = _word_pattern()
    words = [
        [w for w in pattern.findall(unicodedata.normalize("NFKC", text).casefold()) if w not in stopwords]
        for text in texts
    ]
    stems = _stems({w for text_words in words for w in text_words}, settings.stemmer)
    return [[stems[w] for w in text_words] for text_words in words]


def analyze(text: str, settings: LexicalSettings | None = None) -> list[str]:
    """The terms of one text, in order."""
    return analyze_many([text], settings)[0]
