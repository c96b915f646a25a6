"""Label-free training data for `embedkit adapt`: pseudo queries cut from an index's documents, and
the candidates the index's own hybrid ranking gives each of them (no torch here).

Three kinds of pseudo query, none of which needs a generator or a label:

- `ict`: a sentence of a document (inverse cloze, Lee et al. 2019, Sec. 5), always removed from the
  document's text the student is trained to match, so the task is not exact overlap. A document
  without sentence punctuation gives a word span instead (`views.ict_pair`'s stand-in);
- `title`: a document's title, matched against its text alone (where the corpus has titles);
- `terms`: a short keyword query, `TERMS_PER_QUERY` of the document's highest tf-idf words in the
  order they first appear (closer to what people type than a whole sentence).

The teacher's ranking of each query (`mine_candidates`) becomes the candidate list of listwise
distillation: the source document plus the teacher's top `CANDIDATES`, and hard negatives from
teacher ranks `HARD_NEGATIVE_RANKS`, both without the source's near duplicates (a corpus often holds
a document twice; ranking one copy above the other teaches nothing true).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from embedkit.data.corpus import Document
from embedkit.data.sentences import split_into_sentences
from embedkit.errors import InputError
from embedkit.index.lexical import LUCENE_ENGLISH_STOPWORDS
from embedkit.training.views import ict_usable

QUERY_KINDS = ("ict", "title", "terms")
TERMS_PER_QUERY = (3, 6)  # salient-term query length, drawn uniformly: a typical keyword query
MIN_TERM_DOCS = 2  # a word in one document only is more often a typo or a number than a topic
CANDIDATES = 30  # teacher hits the student's ranking is distilled over (RocketQAv2 lists: 1 + 127)
HARD_NEGATIVE_RANKS = (10, 50)  # 1-based teacher ranks whose hits serve as hard negatives
NEAR_DUPLICATE = 0.9  # word-set Jaccard above which a hit counts as a copy of the source
_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")


@dataclass(frozen=True)
class PseudoQuery:
    """A query cut from document `source` (its FAISS row), and the text of it the student matches."""

    text: str
    source: int  # the source document's row in the index
    kind: str  # one of QUERY_KINDS
    positive: str  # the source's text as the student sees it: without the ICT sentence or the title


@dataclass(frozen=True)
class Candidates:
    """What the teacher's ranking of one query gives training (rows are the index's FAISS rows)."""

    rows: list[int]  # the source first, then the teacher's top CANDIDATES hits (copies of it left out)
    scores: list[float]  # the teacher's score of each row; the source's is set by `mine_candidates`
    hard_negatives: list[int]  # teacher ranks HARD_NEGATIVE_RANKS, without the source and its copies


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
        if "ict" in kinds and ict_usable(text):
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
            "(ict needs two sentences or 16 words, title a title, terms three words found in other documents)"
        )
    return queries


def _ict_query(text: str, row: int, rng: random.Random) -> PseudoQuery:
    """A sentence (or, without punctuation, a word span) and the document without it."""
    sentences = split_into_sentences(text)
    if len(sentences) >= 2:
        i = rng.randrange(len(sentences))
        return PseudoQuery(sentences[i], row, "ict", " ".join(sentences[:i] + sentences[i + 1 :]))
    tokens = text.split()
    length = rng.randint(8, min(24, len(tokens) // 2))
    start = rng.randrange(len(tokens) - length + 1)
    rest = tokens[:start] + tokens[start + length :]
    return PseudoQuery(" ".join(tokens[start : start + length]), row, "ict", " ".join(rest))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def mine_candidates(
    ranking: Sequence[tuple[int, float]],
    source: int,
    copies: set[int],
    source_margin: float,
    candidates: int = CANDIDATES,
    negative_ranks: tuple[int, int] = HARD_NEGATIVE_RANKS,
) -> Candidates:
    """The candidate list and hard negatives of one query from the teacher's `ranking` (row, score).

    `copies`: rows that duplicate the source (`near_duplicates`); they are neither candidates nor
    negatives. The source is a positive by construction, whatever rank the teacher gave it: its
    teacher score is `source_margin` above the best other candidate's (for an ICT query the index
    still holds the sentence, so the teacher's own score of the source is inflated by exact overlap).
    """
    others = [(row, score) for row, score in ranking if row != source and row not in copies]
    top = others[:candidates]
    best = max((s for _, s in top), default=0.0)
    low, high = negative_ranks
    negatives = [
        row
        for rank, (row, _) in enumerate(ranking, 1)
        if low <= rank <= high and row != source and row not in copies
    ]
    return Candidates(
        rows=[source, *(r for r, _ in top)],
        scores=[best + source_margin, *(s for _, s in top)],
        hard_negatives=negatives,
    )


def near_duplicates(source: int, rows: Sequence[int], word_sets: dict[int, set[str]]) -> set[int]:
    """The rows among `rows` whose word set is at least `NEAR_DUPLICATE` Jaccard-similar to the source's."""
    own = word_sets[source]
    return {r for r in rows if r != source and jaccard(own, word_sets[r]) >= NEAR_DUPLICATE}


def unique_source_batches(
    sources: Sequence[int], batch_size: int, seed: int, epoch: int
) -> Iterator[list[int]]:
    """Batches of query indices, shuffled by (seed, epoch), no two queries of one document in a batch.

    Another query of the same document would be an in-batch negative that is really a positive. A
    query whose document is already in the batch waits for the next one; a last batch of fewer than
    two queries is dropped (it has no in-batch negative).
    """
    pending = list(range(len(sources)))
    random.Random(f"{seed}-{epoch}").shuffle(pending)
    while pending:
        batch: list[int] = []
        seen: set[int] = set()
        later: list[int] = []
        for i in pending:
            if len(batch) < batch_size and sources[i] not in seen:
                batch.append(i)
                seen.add(sources[i])
            else:
                later.append(i)
        if len(batch) < 2:
            return
        yield batch
        pending = later


__all__ = [
    "CANDIDATES",
    "HARD_NEGATIVE_RANKS",
    "QUERY_KINDS",
    "Candidates",
    "PseudoQuery",
    "make_pseudo_queries",
    "mine_candidates",
    "near_duplicates",
    "salient_terms",
    "unique_source_batches",
]
