"""Sentence splitting for corpora of documents: rule-based, abbreviation-aware, no model needed."""

from __future__ import annotations

import re

# Words that end with a period without ending a sentence (lower-cased, without the period).
# fmt: off
_ABBREVIATIONS = frozenset(
    (
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "cf", "al", "fig", "figs", "eq",
        "eqs", "ref", "refs", "no", "nos", "vol", "pp", "approx", "ca", "inc", "ltd", "co", "corp", "dept",
        "univ", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    )
)
# fmt: on
# A candidate boundary: sentence-final punctuation, optional closing quotes or brackets, spaces.
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")


def split_into_sentences(text: str) -> list[str]:
    """Split text into sentences with a few rules (no model, no download).

    A boundary is `.`, `!` or `?` followed by white space, except after a known abbreviation
    ("Dr.", "Fig."), a word with an inner period ("e.g.", "U.S.") or a single letter (an
    initial), and except before a lower-case letter, unless the punctuation stands alone
    (`word . next`, as in tokenised corpora such as Cranfield, where everything is lower case).
    Blank lines always end a sentence.
    """
    sentences: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        start = 0
        for match in _BOUNDARY.finditer(paragraph):
            if _is_boundary(paragraph, match):
                sentences.append(paragraph[start : match.end()])
                start = match.end()
        sentences.append(paragraph[start:])
    cleaned = (" ".join(s.split()) for s in sentences)
    return [s for s in cleaned if any(ch.isalnum() for ch in s)]


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    before = text[: match.start()]
    if not before or before[-1].isspace():  # a stand-alone " . " ends a sentence
        return True
    word = before.split()[-1].lower().lstrip("(\"'[")
    # "e.g.", "U.S.": a period inside the word marks an abbreviation, as does a lone initial
    if word in _ABBREVIATIONS or "." in word or (len(word) == 1 and word.isalpha()):
        return False
    following = text[match.end() : match.end() + 1]
    return not following.islower()

