"""Document-aware training views: random crops and inverse-cloze pairs (no torch here).

The paper's views (`dropout`) are one sentence twice, told apart only by dropout masks. On an
already sentence-tuned base that task is nearly solved before training starts (InfoNCE about
2e-4 at step 1 on Cranfield sentences), so it carries little signal about the user's documents.
The document views below make the two sides of a pair different texts of one document:

- `crop`: two independent random spans of one document, each 10-50% of its words (Contriever,
  Izacard et al. 2022, Sec. 3.1: independent cropping, span ratio 10-50%);
- `ict`: inverse cloze (Lee et al. 2019, Sec. 5): a sentence of a document is the anchor, the rest
  of the document is the positive; in 10% of pairs the sentence is left in (their "keep" rate), so
  the model also learns to match text it has seen. A document without sentence punctuation (one
  held-out collection is lower-cased abstracts with none) still gives anchors: a word span of
  sentence length stands in for the sentence.

Spans are cut on whitespace words; the tokenizer later truncates the anchor at
`max_seq_length` and the positive at `positive_max_length`. Drawing is a function of the seed,
and always terminates: every usable document yields a pair on every pass, and `limit` pairs need
ceil(limit / usable) passes over the documents.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.data.sentences import split_into_sentences
from embedkit.errors import InputError
from embedkit.evaluation.pseudo_kinds import ICT_SPAN_WORDS, MIN_ICT_WORDS, ict_usable  # shared with adapt

VIEWS = ("dropout", "crop", "ict")
CROP_RATIO = (0.1, 0.5)  # span length as a share of the document's words: Contriever Sec. 3.1
ICT_KEEP_RATE = 0.1  # share of ICT pairs whose positive keeps the anchor sentence: Lee et al. 2019
MIN_CROP_WORDS = 20  # a 10% span of 20 words is 2 words: shorter documents give no crop pair


@dataclass(frozen=True)
class PairStats:
    """What sampling found: documents, how many could be cut, and the pairs drawn."""

    documents: int  # non-blank documents read
    usable: int  # documents long enough for this view
    pairs: int  # pairs drawn (the training examples)
    word_span_anchors: int = 0  # ICT anchors cut as word spans (documents without two sentences)

    def describe(self) -> str:
        text = f"{self.documents:,} documents, {self.usable:,} usable, {self.pairs:,} pairs drawn"
        if self.word_span_anchors:
            text += f" ({self.word_span_anchors:,} ICT anchors as word spans: no sentence punctuation)"
        return text


@dataclass(frozen=True)
class PairSample:
    """Training pairs of one view: anchors[i] and positives[i] come from one document."""

    view: str
    anchors: list[str]
    positives: list[str]
    stats: PairStats
    fingerprint: str  # sha256 (16 hex digits) of the pairs in order

    def __len__(self) -> int:
        return len(self.anchors)


def crop_pair(words: Sequence[str], rng: random.Random) -> tuple[str, str]:
    """Two independent random spans, each `CROP_RATIO` of the words (at least one word)."""
    return _random_span(words, rng), _random_span(words, rng)


def _random_span(words: Sequence[str], rng: random.Random) -> str:
    low, high = CROP_RATIO
    length = max(1, round(rng.uniform(low, high) * len(words)))
    start = rng.randrange(len(words) - length + 1)
    return " ".join(words[start : start + length])


def ict_pair(text: str, rng: random.Random) -> tuple[str, str, bool]:
    """(anchor, positive, whether the anchor is a word span) for one document.

    The caller checks `ict_usable` first.
    """
    sentences = split_into_sentences(text)
    keep = rng.random() < ICT_KEEP_RATE
    if len(sentences) >= 2:
        i = rng.randrange(len(sentences))
        rest = sentences if keep else sentences[:i] + sentences[i + 1 :]
        return sentences[i], " ".join(rest), False
    words = text.split()
    length = rng.randint(ICT_SPAN_WORDS[0], min(ICT_SPAN_WORDS[1], len(words) // 2))
    start = rng.randrange(len(words) - length + 1)
    anchor = " ".join(words[start : start + length])
    rest = words if keep else words[:start] + words[start + length :]
    return anchor, " ".join(rest), True


def crop_usable(text: str) -> bool:
    return len(text.split()) >= MIN_CROP_WORDS


def sample_pairs(texts: Iterable[str], view: str, limit: int | None, seed: int) -> PairSample:
    """Draw `limit` pairs (None: one per usable document) of `view` from documents `texts`.

    Raises `InputError` when no document is long enough for the view (a sentence-per-line file
    is not a corpus of documents).
    """
    if view not in ("crop", "ict"):
        raise InputError(f"unknown document view {view!r}: use crop or ict (dropout needs no pairs)")
    documents = [" ".join(t.split()) for t in texts if t.strip()]
    usable = [d for d in documents if (crop_usable(d) if view == "crop" else ict_usable(d))]
    if not usable:
        need = (
            f"at least {MIN_CROP_WORDS} words"
            if view == "crop"
            else f"two sentences or at least {MIN_ICT_WORDS} words"
        )
        raise InputError(
            f"--views {view} needs documents of {need}; none of the {len(documents):,} texts has that "
            "(a sentence-per-line file? use --views dropout, or give documents: JSON lines or a BEIR folder)"
        )
    wanted = len(usable) if limit is None else limit
    rng = random.Random(seed)
    anchors: list[str] = []
    positives: list[str] = []
    spans = 0
    for _ in range(math.ceil(wanted / len(usable))):
        for index in rng.sample(range(len(usable)), len(usable)):
            if len(anchors) == wanted:
                break
            if view == "crop":
                anchor, positive = crop_pair(usable[index].split(), rng)
            else:
                anchor, positive, span = ict_pair(usable[index], rng)
                spans += span
            anchors.append(anchor)
            positives.append(positive)
    digest = hashlib.sha256()
    for anchor, positive in zip(anchors, positives, strict=True):
        digest.update(anchor.encode() + b"\x00" + positive.encode() + b"\n")
    stats = PairStats(len(documents), len(usable), len(anchors), spans)
    return PairSample(view, anchors, positives, stats, digest.hexdigest()[:16])


@dataclass(frozen=True)
class TrainingExamples:
    """What a run trains on: one text per example (dropout views), or anchor and positive texts."""

    anchors: list[str]
    positives: list[str] | None  # None: the dropout views of `anchors`
    fingerprint: str
    stats: Any  # CorpusStats (dropout) or PairStats: `describe()` and dataclass fields

    def __len__(self) -> int:
        return len(self.anchors)


def load_examples(corpus: Any, config: Any, pseudo_set: Any = None) -> TrainingExamples:
    """The training examples `config.views` asks for, from a corpus file or folder, or a list of texts.

    `pseudo_set` (the dev pseudo queries): their query sentences are held out of training, as
    sentences (dropout) or cut out of their documents (crop, ict).
    """
    from embedkit.data.corpus import load_sentences, read_documents

    if config.views == "dropout":
        held_out = pseudo_set.exclude if pseudo_set is not None else None
        sample = load_sentences(
            corpus, config.column, config.split_sentences, config.limit, config.limit_seed, held_out
        )
        return TrainingExamples(sample.sentences, None, sample.fingerprint, sample.stats)
    if isinstance(corpus, (str, Path)):
        documents = {d.id: d.full_text for d in read_documents(corpus, config.column)}
    else:
        documents = {str(i): text for i, text in enumerate(corpus)}
    for query in pseudo_set.queries if pseudo_set is not None else ():
        if query.doc_id in documents:
            documents[query.doc_id] = documents[query.doc_id].replace(query.text, " ")
    pairs = sample_pairs(documents.values(), config.views, config.limit, config.limit_seed)
    return TrainingExamples(pairs.anchors, pairs.positives, pairs.fingerprint, pairs.stats)


__all__ = [
    "CROP_RATIO",
    "ICT_KEEP_RATE",
    "VIEWS",
    "PairSample",
    "PairStats",
    "TrainingExamples",
    "load_examples",
    "sample_pairs",
]
