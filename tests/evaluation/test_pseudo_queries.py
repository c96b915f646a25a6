"""Pseudo-query construction and evaluation (inverse cloze task), without a neural model."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from fixture_text import AERO_WORDS

from embedkit.data.corpus import Document, load_sentences, split_into_sentences
from embedkit.errors import InputError
from embedkit.evaluation.pseudo_queries import build_pseudo_queries, evaluate_pseudo

KEYWORDS = ("apple", "banana", "cherry")


class KeywordEncoder:
    """A hand-made encoder: a text's vector counts the three fruit words, nothing else."""

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        rows = []
        for text in texts:
            words = re.findall(r"[a-z]+", text.lower())
            rows.append([words.count(k) for k in KEYWORDS])
        vectors = np.asarray(rows, dtype=np.float32)
        if normalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


# Only the first sentence of each document has 5 words, so it is the query whatever the seed.
HAND_CORPUS = [
    Document("d1", "Apple apple apple apple apple. Apple pie. Banana split."),
    Document("d2", "Banana banana banana banana banana. Cherry jam. Banana bread. Cherry tart. Cherry cake."),
    Document("d3", "Cherry cherry cherry cherry cherry. Cherry pie. Cherry jam. Apple tea."),
    Document("d4", "Banana cake. Banana tea."),  # two sentences: a distractor, never a query
]


def test_hand_built_corpus_gives_hand_computed_metrics() -> None:
    pseudo = build_pseudo_queries(HAND_CORPUS, n_queries=10, seed=3)
    assert [(q.doc_id, q.text) for q in pseudo.queries] == [
        ("d1", "Apple apple apple apple apple."),
        ("d2", "Banana banana banana banana banana."),
        ("d3", "Cherry cherry cherry cherry cherry."),
    ]
    assert pseudo.corpus["d1"] == "Apple pie. Banana split."
    assert pseudo.corpus["d4"] == "Banana cake. Banana tea."
    assert pseudo.eligible_documents == 3
    # Cosine by hand (vectors apple, banana, cherry): d1 rest (1,1,0), d2 rest (0,1,3),
    # d3 rest (1,0,2), d4 (0,2,0).
    # q1 (1,0,0): d1 .707 > d3 .447 > d2 = d4 = 0  -> target at rank 1
    # q2 (0,1,0): d4 1 > d1 .707 > d2 .316 > d3 0  -> rank 3
    # q3 (0,0,1): d2 .949 > d3 .894 > ...          -> rank 2
    metrics = evaluate_pseudo(KeywordEncoder(), pseudo)
    assert metrics["mrr@10"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 3)
    assert metrics["ndcg@10"] == pytest.approx((1 + 1 / math.log2(4) + 1 / math.log2(3)) / 3)
    assert metrics["recall@10"] == pytest.approx(1.0)
    assert pseudo.qrels == {"pq0": {"d1": 1}, "pq1": {"d2": 1}, "pq2": {"d3": 1}}


def _synthetic_corpus(n_docs: int = 60) -> list[Document]:
    rng = np.random.default_rng(0)
    docs = []
    for d in range(n_docs):
        sentences = [
            f"Document {d} sentence {s} says " + " ".join(rng.choice(AERO_WORDS, size=5)) + "."
            for s in range(int(rng.integers(1, 6)))
        ]
        docs.append(Document(f"doc{d}", " ".join(sentences), title=f"Title {d}"))
    return docs


def test_deterministic_given_the_seed() -> None:
    docs = _synthetic_corpus()
    first = build_pseudo_queries(docs, n_queries=10, seed=7)
    again = build_pseudo_queries(docs, n_queries=10, seed=7)
    other = build_pseudo_queries(docs, n_queries=10, seed=8)
    assert first.queries == again.queries and first.corpus == again.corpus
    assert first.fingerprint == again.fingerprint
    assert [q.text for q in first.queries] != [q.text for q in other.queries]
    assert first.fingerprint != other.fingerprint


def test_queries_come_from_documents_with_three_sentences_and_leave_them() -> None:
    docs = {d.id: d for d in _synthetic_corpus()}
    pseudo = build_pseudo_queries(docs.values(), n_queries=15, seed=1)
    assert pseudo.eligible_documents == sum(
        len(split_into_sentences(d.full_text)) >= 3 for d in docs.values()
    )
    assert len(pseudo.queries) == 15
    assert len({q.doc_id for q in pseudo.queries}) == 15
    for query in pseudo.queries:
        assert len(split_into_sentences(docs[query.doc_id].full_text)) >= 3
        assert query.text in docs[query.doc_id].full_text
        assert query.text not in pseudo.corpus[query.doc_id]
    untouched = set(docs) - {q.doc_id for q in pseudo.queries}
    assert all(pseudo.corpus[d] == docs[d].full_text for d in untouched)


def test_no_query_sentence_reaches_the_training_subset() -> None:
    docs = _synthetic_corpus()
    pseudo = build_pseudo_queries(docs, n_queries=20, seed=0)
    sentences = load_sentences([d.full_text for d in docs], split_sentences=True).sentences
    kept, dropped = pseudo.exclude(sentences)
    assert dropped == 20  # every query sentence is unique in this corpus
    assert len(kept) == len(sentences) - 20
    for query in pseudo.queries:
        assert all(query.text.lower().rstrip(".") not in s.lower() for s in kept)
    for size, seed in [(50, 0), (50, 1), (len(kept), 2)]:
        subset = load_sentences(kept, limit=size, seed=seed).sentences
        assert not {q.text for q in pseudo.queries} & set(subset)
    # Unsplit documents that contain a query sentence are dropped too.
    kept_docs, dropped_docs = pseudo.exclude([d.full_text for d in docs])
    assert dropped_docs == 20
    assert all(q.text not in text for q in pseudo.queries for text in kept_docs)


def test_title_repeated_as_first_sentence_is_not_left_behind() -> None:
    # Cranfield style: the title is also the text's first sentence, all lower case, " ." endings.
    doc = Document("1", "a study of wing flow at high speed . second sentence here . third sentence here .")
    doc.title = "a study of wing flow at high speed ."
    pseudo = build_pseudo_queries([doc], n_queries=1, seed=0, min_query_words=4)
    (query,) = pseudo.queries
    assert query.text.rstrip(" .") not in pseudo.corpus["1"]
    assert len(pseudo.corpus["1"].split(" . ")) == 2  # the two other sentences, once each


def test_corpus_without_multi_sentence_documents_is_an_input_error() -> None:
    docs = [Document(str(i), f"Just one sentence number {i} here.") for i in range(5)]
    with pytest.raises(InputError, match="no document has 3 or more sentences"):
        build_pseudo_queries(docs)


def test_bad_arguments() -> None:
    with pytest.raises(InputError, match="at least 1"):
        build_pseudo_queries(HAND_CORPUS, n_queries=0)
    with pytest.raises(InputError, match="occurs twice"):
        build_pseudo_queries([*HAND_CORPUS, Document("d1", "again")])
    with pytest.raises(InputError, match="no documents"):
        build_pseudo_queries([])


class WordVectorEncoder:
    """A bag-of-words encoder: each word a random vector drawn once (seeded), a text their sum.

    Different texts never score alike by chance; equal texts embed equally, so they tie exactly.
    """

    def __init__(self) -> None:
        self.rng, self.words = np.random.default_rng(5), {}

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        rows = []
        for text in texts:
            words = re.findall(r"[a-z0-9]+", text.lower())
            rows.append(sum(self.words.setdefault(w, self.rng.standard_normal(12)) for w in words))
        vectors = np.asarray(rows, dtype=np.float64)
        if normalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32)


def reference_metrics(encoder, pseudo) -> dict[str, float]:
    """The slow obvious reading: every document scored, sorted by score then doc id descending
    (trec_eval's order), and the one target's rank read off by hand."""
    doc_ids = list(pseudo.corpus)
    docs = encoder.encode([pseudo.corpus[d] for d in doc_ids], normalize=True).astype(np.float64)
    totals = {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@10": 0.0}
    for query in pseudo.queries:
        vector = encoder.encode([query.text], normalize=True)[0].astype(np.float64)
        scores = {d: float(v @ vector) for d, v in zip(doc_ids, docs, strict=True)}
        ranked = sorted(sorted(doc_ids, reverse=True), key=lambda d: -scores[d])[:10]
        if query.doc_id in ranked:
            rank = ranked.index(query.doc_id) + 1
            totals["ndcg@10"] += 1 / math.log2(rank + 1)
            totals["mrr@10"] += 1 / rank
            totals["recall@10"] += 1
    return {name: total / len(pseudo.queries) for name, total in totals.items()}


def test_metrics_match_a_brute_force_ranking_ties_by_doc_id() -> None:
    # Each source keeps two sentences that a distractor holds word for word: once its query is cut,
    # source and distractor tie exactly; the larger id goes first, the source in one pair, not the other.
    tied = []
    for source, distractor in (("tie-a", "tie-b"), ("tie-z", "tie-c")):
        rest = f"Rotor blade stall {source}. Flutter margin test {source}."
        tied.append(Document(source, f"Rotor blade stall flutter margin grows near {source}. {rest}"))
        tied.append(Document(distractor, rest))
    encoder = WordVectorEncoder()
    pseudo = build_pseudo_queries([*_synthetic_corpus(40), *tied], n_queries=1000, seed=0)
    assert {"tie-a", "tie-z"} <= {q.doc_id for q in pseudo.queries}
    assert pseudo.corpus["tie-a"] == pseudo.corpus["tie-b"]
    metrics = evaluate_pseudo(encoder, pseudo)
    expected = reference_metrics(encoder, pseudo)
    assert metrics == pytest.approx(expected, abs=1e-9)
    assert 0 < expected["ndcg@10"] < 1
