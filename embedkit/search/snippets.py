"""A hit's snippet: the window of its text that best answers the query, as one line of plain text.

The one implementation of snippets: the search pipeline gives every hit of `embedkit search`,
`/search`, the search page and the Python API its snippet here (`snippets`). The text is the
document's, or in an index of passages the hit's best passage (the one its ranking scored best:
the model's, by meaning, in dense and hybrid search), without the title (every side shows it).

How the window is chosen:

1. The text is cut into units: sentences (a `.`, `!` or `?` before a capital or a digit, a blank
   line, a line that opens a Markdown block or follows a short heading-like line), a sentence
   longer than the snippet into pieces cut at spaces.
2. The units that hold a term of the query are found by the store's own analyzer (the index's
   BM25 analysis: its stopwords and stemmer, so "descaling" finds "descale"); a case-blind search
   for each term's stem less its last letter first picks the units worth analysing, so a long
   document costs little more than a short one.
3. A window is the units from one holding a query term on, as many whole ones as fit
   `SNIPPET_CHARS`. Its score is BM25 (k1 1.2, b 0.75, the lexical side's) over the window, each
   term counted once (a window is a sentence or three: a repeat there is the text's topic, not
   an answer), half where only a sentence after the first holds it (`CONTEXT_SHARE`: the
   snippet opens with the sentence that answers), and weighed by its IDF among the text's units
   (which part of this text it singles out) times its IDF in the index, where the store knows
   it (whether the term tells documents apart at all), times its count in the query, halved
   where the document's title holds it (`TITLE_SHARE`). The words a question is asked with
   ("how", "should", "I": `QUESTION_WORDS`) are left out where the query holds others.
4. The best window shows, the first on equal scores; where no term of the query is in the text,
   its first window.

The window is shown as one line (`embedkit.data.plain_text.one_line`: Markdown's markup dropped
by markdown-it-py's CommonMark parse, white space collapsed), HTML-escaped, the query's terms in
<b>, and "…" where a sentence was cut.
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from embedkit.data.plain_text import one_line

SNIPPET_CHARS = 200  # the most characters of a snippet, "…" included: tantivy's snippets' default
K1, B = 1.2, 0.75  # BM25's, as the lexical side scores (tantivy's and Lucene's)
# A query's term that the document's title holds weighs half: the title says what the whole text is
# about ("espresso machine" in its manual), the window should show the part about the rest
TITLE_SHARE = 0.5
# The words a question is asked with, not answered with ("how often should I ..."): they locate no
# answer (a FAQ's question, an intro's "how to"), so a snippet leaves them out where the query holds
# other terms (English; the lexical side's stopwords are out already)
_ASKED_WITH = (
    "how what when where which who whom whose why should would could can may might must shall do does "
    "did i me my we our you your"
)
QUESTION_WORDS = frozenset(_ASKED_WITH.split())
# A term the window's first sentence does not hold, only a later one, weighs half: the snippet
# opens with the sentence that answers, the next ones are its context
CONTEXT_SHARE = 0.5
HEADING_CHARS = 60  # a line shorter than this, before a capital, ends a unit: a heading's length
# The lowercased words that end in "." without ending a sentence
_ABBREVIATED = "mr. mrs. ms. dr. prof. st. no. fig. vs. e.g. i.e. cf. approx. ca."
ABBREVIATIONS = frozenset(_ABBREVIATED.split())
# A sentence's end (its punctuation and closing quotes), a CJK one, or a line's end
_BREAK = re.compile(r"[.!?…][\"'”’)\]]*(?=\s)|[。！？][\"'”’」』)]*|\n")
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}\s|>|\||[-*+•]\s|\d{1,3}[.)]\s|```|~~~)")
_OPENERS = "\"'“‘([#>*-•"
_LAST_WORD = re.compile(r"\S*$")
_INITIAL = re.compile(r"[^\W\d_]\.")  # "J."
_ITEM_NUMBER = re.compile(r"\d{1,3}\.")  # "1." of a list
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’」』)\]]*$")


class Analysis(Protocol):
    """What a snippet needs from a store's lexical side (`embedkit.search.store.SearchStore`)."""

    def term_spans(self, text: str) -> list[tuple[str, int, int]]: ...

    def term_idf(self, terms: Sequence[str]) -> dict[str, float]: ...


@dataclass(frozen=True)
class Unit:
    """Characters `start:end` of a text: a sentence, or a piece of a long one."""

    start: int
    end: int
    opens: bool = True  # starts a sentence (a piece after the first does not: shown after "…")
    closes: bool = True  # ends one


def snippets(
    query: str,
    texts: Sequence[str],
    analysis: Analysis,
    titles: Sequence[str] | None = None,
    cut: Sequence[tuple[bool, bool]] | None = None,
    limit: int = SNIPPET_CHARS,
) -> list[str]:
    """Each text's window that best answers `query` (see the module docstring), as HTML: the
    text escaped, the query's terms in <b>, at most `limit` characters shown. `titles`: each
    text's document's title, whose terms weigh `TITLE_SHARE` as much; `cut`: whether each text
    was cut from a longer one (a passage) at its start and at its end, where "…" shows it goes on."""
    asked = as_analyzed(query)
    spans = analysis.term_spans(asked)
    telling = [t for t, start, end in spans if asked[start:end].lower() not in QUESTION_WORDS]
    counts = Counter(telling or [t for t, _, _ in spans])  # a query of question words alone keeps them
    corpus = analysis.term_idf(sorted(counts)) if counts else {}
    weights = {term: n * corpus.get(term, 1.0) for term, n in counts.items()}
    made = []
    titles = titles if titles is not None else [""] * len(texts)
    for text, title, ends in zip(texts, titles, cut or [(False, False)] * len(texts), strict=True):
        about = set(_terms(title, analysis)) if title else set()
        own = {t: w * (TITLE_SHARE if t in about else 1.0) for t, w in weights.items()}
        made.append(_snippet(as_analyzed(text), own, analysis, limit, ends))
    return made


def _terms(text: str, analysis: Analysis) -> list[str]:
    return [term for term, _, _ in analysis.term_spans(as_analyzed(text))]


def as_analyzed(text: str) -> str:
    """`text` as the lexical side reads it (`embedkit.index.lexical.prepare`): NFKC, and no lone
    surrogate (it cannot cross into tantivy), so the analyzer's offsets are this text's."""
    text = unicodedata.normalize("NFKC", text)
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def _snippet(
    text: str, weights: dict[str, float], analysis: Analysis, limit: int, cut: tuple[bool, bool]
) -> str:
    budget = limit - 2  # room for "…" at both ends
    units = text_units(text, budget)
    if not units:
        return ""
    if cut[0] and not (text[units[0].start].isupper() or text[units[0].start].isdigit()):
        units[0] = replace(units[0], opens=False)  # a passage that starts inside a sentence
    if cut[1] and not _SENTENCE_END.search(text, 0, units[-1].end):
        units[-1] = replace(units[-1], closes=False)  # one that ends inside a sentence
    found = _units_with_terms(text, units, weights, analysis) if weights else {}
    first = best_window(units, found, weights, budget) if found else 0
    return _shown(text, units[first : window_end(units, first, budget)], set(weights), analysis, limit)


# --- units and windows ---------------------------------------------------------------------------


def text_units(text: str, budget: int = SNIPPET_CHARS) -> list[Unit]:
    """`text`'s sentences, white space trimmed, each longer than `budget` cut into pieces of at
    most `budget // 2` characters at spaces."""
    units: list[Unit] = []
    start = 0
    for found in _BREAK.finditer(text):
        if _ends_unit(text, found):
            units.extend(_pieces(text, start, found.end(), budget))
            start = found.end()
    units.extend(_pieces(text, start, len(text), budget))
    return units


def _ends_unit(text: str, found: re.Match[str]) -> bool:
    """Whether the break `found` ends a sentence (see the module docstring)."""
    mark, after = found.group(), found.end()
    if mark[0] in "。！？":
        return True
    if mark == "\n":
        line = text[text.rfind("\n", 0, found.start()) + 1 : found.start()].strip()
        stop = text.find("\n", after)
        following = text[after : stop if stop >= 0 else len(text)].lstrip()
        if not line or not following or _BLOCK_START.match(following):
            return True
        return len(line) < HEADING_CHARS and (following[0].isupper() or following[0].isdigit())
    last = _LAST_WORD.search(text, max(found.start() - 12, 0), found.start() + 1)  # `\S*$` always matches
    word = last.group().lower() if last is not None else ""
    if word in ABBREVIATIONS or _INITIAL.fullmatch(word):  # "Dr." and "J." end no sentence
        return False
    opens = found.start() + 1 - len(word)
    if _ITEM_NUMBER.fullmatch(word) and not text[text.rfind("\n", 0, opens) + 1 : opens].strip():
        return False  # "1. " at a line's start numbers a list's item
    rest = text[after : after + 8].lstrip()
    return not rest or rest[0].isupper() or rest[0].isdigit() or rest[0] in _OPENERS


def _pieces(text: str, start: int, end: int, budget: int) -> list[Unit]:
    """The unit `text[start:end]` trimmed; a longer one than `budget` as pieces cut at spaces."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end - start <= budget:
        return [Unit(start, end)] if end > start else []
    pieces: list[Unit] = []
    size = max(budget // 2, 1)
    while end - start > size:
        space = text.rfind(" ", start + 1, start + size + 1)
        cut = space if space > start else start + size
        pieces.append(Unit(start, cut, opens=not pieces, closes=False))
        start = cut + (cut == space)
    pieces.append(Unit(start, end, opens=False, closes=True))
    return pieces


def window_end(units: Sequence[Unit], first: int, budget: int) -> int:
    """One past the last unit of the window that starts at unit `first`: as many as fit `budget`."""
    end = first + 1
    while end < len(units) and units[end].end - units[first].start <= budget:
        end += 1
    return end


def best_window(
    units: Sequence[Unit], found: dict[int, set[str]], weights: dict[str, float], budget: int
) -> int:
    """The first unit of the best window (step 3 of the module docstring); `found`: unit -> the
    query's terms in it, for the units that hold any."""
    held = Counter(term for terms in found.values() for term in terms)  # units holding each term
    idf = {t: w * math.log(1 + (len(units) - held[t] + 0.5) / (held[t] + 0.5)) for t, w in weights.items()}
    windows = [(first, window_end(units, first, budget)) for first in sorted(found)]
    lengths = [units[end - 1].end - units[first].start for first, end in windows]
    mean = sum(lengths) / len(lengths)
    best, best_score = windows[0][0], -math.inf
    for (first, end), length in zip(windows, lengths, strict=True):
        later = set().union(*(found.get(unit, ()) for unit in range(first + 1, end))) - found[first]
        terms = sum(idf[t] for t in found[first]) + CONTEXT_SHARE * sum(idf[t] for t in later)
        score = terms * (K1 + 1) / (1 + K1 * (1 - B + B * length / mean))
        if score > best_score:
            best, best_score = first, score
    return best


def _units_with_terms(
    text: str, units: Sequence[Unit], weights: dict[str, float], analysis: Analysis
) -> dict[int, set[str]]:
    """Unit -> the query's terms in it, for the units that hold any (step 2)."""
    stems = {term if len(term) <= 3 else term[:-1] for term in weights}
    starts = [unit.start for unit in units]
    candidates = sorted({bisect_right(starts, at) - 1 for at in _found_at(text, stems)} - {-1})
    found = {}
    for index in candidates:
        unit = units[index]
        terms = {t for t, _, _ in analysis.term_spans(text[unit.start : unit.end]) if t in weights}
        if terms:
            found[index] = terms
    return found


def _found_at(text: str, stems: set[str]) -> list[int]:
    """Where each of `stems` (lower case) is in `text`, case-blind: a search of the lowered text
    (as fast as `str.find`), or a pattern where lowering changes the text's length ("İ")."""
    lowered = text.lower()
    if len(lowered) != len(text):
        near = re.compile("|".join(re.escape(stem) for stem in stems), re.IGNORECASE)
        return [hit.start() for hit in near.finditer(text)]
    found = []
    for stem in stems:
        at = lowered.find(stem)
        while at >= 0:
            found.append(at)
            at = lowered.find(stem, at + 1)
    return found


# --- the window shown ----------------------------------------------------------------------------


def _shown(text: str, window: Sequence[Unit], terms: set[str], analysis: Analysis, limit: int) -> str:
    """The window as one line of HTML: its plain text escaped, `terms` in <b>, "…" at a cut."""
    plain = one_line(text[window[0].start : window[-1].end])
    lead = "" if window[0].opens else "…"
    tail = "" if window[-1].closes else "…"
    room = limit - len(lead) - len(tail)
    if len(plain) > room:  # Markdown's numbers put back, or one long unbroken word
        space = plain.rfind(" ", 0, room - 1)
        plain, tail = plain[: space if space > room // 2 else room - 1], "…"
    parts, at = [lead], 0
    for term, start, end in analysis.term_spans(plain):
        if term in terms:
            marked = html.escape(plain[start:end], quote=False)
            parts += [html.escape(plain[at:start], quote=False), f"<b>{marked}</b>"]
            at = end
    parts += [html.escape(plain[at:], quote=False), tail]
    return "".join(parts)
