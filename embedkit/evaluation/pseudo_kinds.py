"""Label-free pseudo queries of four kinds, each with its known source document (no torch here).

Shared by `embedkit adapt` (its training and dev queries, `embedkit.training.adapt.queries`) and by
the fusion calibration of an index (`embedkit.evaluation.fusion_calibration`), so both read one generator:

- `ict`: a sentence of a document (inverse cloze, Lee et al. 2019, Sec. 5), always removed from the
  document's text it is matched against (`PseudoQuery.positive`), so the task is not exact overlap.
  A document without sentence punctuation gives a word span instead (`ICT_SPAN_WORDS`);
- `title`: a document's title, matched against its text alone (where the corpus has titles);
- `terms`: a short keyword query, `TERMS_PER_QUERY` of the document's highest tf-idf words in the
  order they first appear (closer to what people type than a whole sentence);
- `window`: for a document ict cannot cut into sentences (a short record without punctuation, one
  long line), a window of `WINDOW_WORDS` consecutive words, as long as a typed query, removed from
  the document, which keeps at least twice as many words (`WINDOW_KEEPS`) and so stays
  recognisable. Where `window` is asked for, it replaces ict's word span.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from embedkit.data.corpus import Document
from embedkit.data.sentences import split_into_sentences
from embedkit.errors import InputError
from embedkit.index.lexical import LUCENE_ENGLISH_STOPWORDS

QUERY_KINDS = ("ict", "title", "terms", "window")
TERMS_PER_QUERY = (3, 6)  # salient-term query length, drawn uniformly: a typical keyword query
MIN_TERM_DOCS = 2  # a word in one document only is more often a typo or a number than a topic
ICT_SPAN_WORDS = (8, 24)  # the stand-in sentence of an unpunctuated document: a typical sentence
MIN_ICT_WORDS = 2 * ICT_SPAN_WORDS[0]  # the stand-in must leave at least as much context as it takes
WINDOW_WORDS = (4, 8)  # a window query's length, drawn uniformly: a typical typed query (MS MARCO's: 6)
WINDOW_KEEPS = 2  # the document keeps at least this many times the window's words
_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")


@dataclass(frozen=True)
class PseudoQuery:
    """A query cut from document `source` (its row), and the text of it the query is matched against."""

    text: str
    source: int  # the source document's row (its position in the documents given)
    kind: str  # one of QUERY_KINDS
    positive: str  # the source's text without the ICT sentence or the title


def ict_usable(text: str) -> bool:
    """Whether `text` gives an ICT query: two sentences, or enough words for a word span."""
    return len(split_into_sentences(text)) >= 2 or len(text.split()) >= MIN_ICT_WORDS


def words(text: str) -> list[str]:
    """Lower-cased words of three letters or more, stopwords out: what tf-idf and Jaccard count."""
    return [w for w in _WORD.findall(text.casefold()) if w not in LUCENE_ENGLISH_STOPWORDS]


def document_frequencies(texts: Sequence[str]) -> Counter[str]:
    return Counter(w for text in texts for w in set(words(text)))


def salient_terms(text: str, df: Counter[str], n_docs: int, count: int) -> list[str]:
    """The `count` words of `text` with the highest tf x idf, in the order they first appear.

    idf is BM25's, log(1 + (N - df + 0.5) / (df + 0.5)); words found in fewer than `MIN_TERM_DOCS`
    documents are skipped. Ties go to the earlier word, so the result is a function of the text.
    """
    tokens = words(text)
    tf = Counter(tokens)
    first = {w: i for i, w in reversed(list(enumerate(tokens)))}

    def weight(w: str) -> float:
        return tf[w] * math.log(1 + (n_docs - df[w] + 0.5) / (df[w] + 0.5))

    usable = [w for w in tf if df[w] >= MIN_TERM_DOCS]
    chosen = sorted(usable, key=lambda w: (-weight(w), first[w]))[:count]
    return sorted(chosen, key=first.__getitem__)


def make_pseudo_queries(documents: Sequence[Document], kinds: Sequence[str], seed: int) -> list[PseudoQuery]:
    """One pseudo query of each kind from every document that can give it (row i is documents[i]).

    Raises `InputError` for an unknown kind, or when no document gives any query.
    """
    unknown = [k for k in kinds if k not in QUERY_KINDS]
    if unknown or not kinds:
        raise InputError(f"unknown pseudo-query kind {','.join(unknown)!r}: use {', '.join(QUERY_KINDS)}")
    rng = random.Random(seed)
    df = document_frequencies([d.full_text for d in documents]) if "terms" in kinds else Counter()
    queries: list[PseudoQuery] = []
    for row, doc in enumerate(documents):
        text = " ".join(doc.full_text.split())
        sentences = len(split_into_sentences(text)) >= 2
        if "window" in kinds and not sentences:
            if len(text.split()) >= (1 + WINDOW_KEEPS) * WINDOW_WORDS[0]:
                queries.append(_window_query(text, row, rng))
        elif "ict" in kinds and ict_usable(text):
            queries.append(_ict_query(text, row, rng))
        if "title" in kinds and doc.title.strip() and doc.text.strip():
            queries.append(PseudoQuery(" ".join(doc.title.split()), row, "title", " ".join(doc.text.split())))
        if "terms" in kinds:
            terms = salient_terms(text, df, len(documents), rng.randint(*TERMS_PER_QUERY))
            if len(terms) >= TERMS_PER_QUERY[0]:
                queries.append(PseudoQuery(" ".join(terms), row, "terms", text))
    if not queries:
        raise InputError(
            f"no pseudo query of kind {', '.join(kinds)} could be cut from the {len(documents):,} documents "
            "(ict needs two sentences or 16 words, title a title, terms three words found in other "
            "documents, window 12 words)"
        )
    return queries


def _ict_query(text: str, row: int, rng: random.Random) -> PseudoQuery:
    """A sentence (or, without punctuation, a word span) and the document without it."""
    sentences = split_into_sentences(text)
    if len(sentences) >= 2:
        i = rng.randrange(len(sentences))
        return PseudoQuery(sentences[i], row, "ict", " ".join(sentences[:i] + sentences[i + 1 :]))
    tokens = text.split()
    length = rng.randint(ICT_SPAN_WORDS[0], min(ICT_SPAN_WORDS[1], len(tokens) // 2))
    start = rng.randrange(len(tokens) - length + 1)
    rest = tokens[:start] + tokens[start + length :]
    return PseudoQuery(" ".join(tokens[start : start + length]), row, "ict", " ".join(rest))


def _window_query(text: str, row: int, rng: random.Random) -> PseudoQuery:
    """A window of `WINDOW_WORDS` words, and the document without it (`WINDOW_KEEPS` times as long)."""
    tokens = text.split()
    length = rng.randint(WINDOW_WORDS[0], min(WINDOW_WORDS[1], len(tokens) // (1 + WINDOW_KEEPS)))
    start = rng.randrange(len(tokens) - length + 1)
    rest = tokens[:start] + tokens[start + length :]
    return PseudoQuery(" ".join(tokens[start : start + length]), row, "window", " ".join(rest))
