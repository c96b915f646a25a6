"""Label-free in-domain retrieval evaluation: pseudo queries cut from the corpus itself.

Most users have documents but no queries with relevance judgments. Following the inverse cloze
task (ICT) of Lee et al. 2019, "Latent Retrieval for Weakly Supervised Open Domain Question
Answering" (Sec. 4), a held-out sample of documents with several sentences each gives one
sentence as the query; the rest of its document is the one relevant target, searched among all
documents of the corpus. Unlike ICT's pre-training (which keeps the sentence in its context 10%
of the time), the query sentence is always removed from its document, so the task cannot be
solved by string matching.

The query sentences must never be trained on: `PseudoQuerySet.exclude` drops every training text
that equals or contains one. Everything is deterministic given the seed. No torch here.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from embedkit.data.corpus import Document
from embedkit.data.sentences import split_into_sentences
from embedkit.encode.prefixes import Prefixes
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.memory_store import MemoryStore
from embedkit.evaluation.metrics import evaluate_run, parse_metric
from embedkit.evaluation.runs import run_of_hits
from embedkit.search import pipeline
from embedkit.search.request import SearchRequest

PSEUDO_METRICS = ("ndcg@10", "mrr@10", "recall@10")  # each query has one target: rank-based metrics
MIN_SENTENCES = 3  # a query and at least two sentences of context left to find
MIN_QUERY_WORDS = 5  # shorter sentences ("see fig. 2.") carry too little to be a query
DEFAULT_QUERIES = 200  # the size of a typical judged test set (Cranfield has 225 queries)


def normalize_text(text: str) -> str:
    """Case-folded, whitespace-collapsed, without end punctuation: how texts are compared."""
    return " ".join(text.casefold().split()).strip(" .!?;:,")


@dataclass(frozen=True)
class HeldOutQuery:
    """A sentence cut from a held-out document, searched for that document (`eval pseudo`; the
    label-free kinds of `adapt` and the calibration are `embedkit.evaluation.pseudo_kinds`)."""

    id: str
    text: str  # the sentence, as it appears in the corpus
    doc_id: str  # the document it was cut from: the one relevant target


@dataclass
class PseudoQuerySet:
    """Queries, the searched corpus (held-out documents without their query) and the judgments."""

    queries: list[HeldOutQuery]
    corpus: dict[str, str]  # doc id -> searched text; held-out documents lack their query sentence
    seed: int
    eligible_documents: int  # documents that could have given a query

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return {q.id: {q.doc_id: 1} for q in self.queries}

    @property
    def fingerprint(self) -> str:
        """A short hash of the queries and targets: equal sets give equal fingerprints."""
        digest = hashlib.sha256()
        for query in self.queries:
            digest.update(f"{query.id}\t{query.doc_id}\t{query.text}\n".encode())
        return digest.hexdigest()[:16]

    def _pattern(self) -> re.Pattern[str]:
        keys = sorted({normalize_text(q.text) for q in self.queries}, key=len, reverse=True)
        return re.compile("|".join(re.escape(k) for k in keys if k))

    def exclude(self, texts: Iterable[str]) -> tuple[list[str], int]:
        """Training texts without any that equals or contains a query sentence, and how many were dropped."""
        pattern = self._pattern()
        kept: list[str] = []
        dropped = 0
        for text in texts:
            if pattern.search(normalize_text(text)):
                dropped += 1
            else:
                kept.append(text)
        return kept, dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "fingerprint": self.fingerprint,
            "eligible_documents": self.eligible_documents,
            "documents": len(self.corpus),
            "queries": [{"id": q.id, "text": q.text, "doc_id": q.doc_id} for q in self.queries],
        }


def _unique_sentences(text: str) -> list[str]:
    """The document's sentences, a repeat (a title restated as the first sentence) kept once."""
    seen: set[str] = set()
    out = []
    for sentence in split_into_sentences(text):
        key = normalize_text(sentence)
        if key and key not in seen:
            seen.add(key)
            out.append(sentence)
    return out


def build_pseudo_queries(
    documents: Iterable[Document],
    n_queries: int = DEFAULT_QUERIES,
    seed: int = 0,
    min_sentences: int = MIN_SENTENCES,
    min_query_words: int = MIN_QUERY_WORDS,
) -> PseudoQuerySet:
    """Cut one query sentence from each of up to `n_queries` documents drawn with `seed`.

    A document is eligible when it has at least `min_sentences` distinct sentences; its query is
    a random sentence of at least `min_query_words` words that no other document contains (a
    boilerplate sentence would have several right answers). Documents that give no query stay in
    the searched corpus as distractors.
    """
    if n_queries < 1:
        raise InputError(f"the number of pseudo queries must be at least 1, got {n_queries}")
    if min_sentences < 2:
        raise InputError(f"a pseudo query needs documents of at least 2 sentences, got {min_sentences}")
    docs = list(documents)
    if not docs:
        raise InputError("the corpus holds no documents")
    split: dict[str, list[str]] = {}
    corpus: dict[str, str] = {}
    for doc in docs:
        if doc.id in corpus:
            raise InputError(f"document id {doc.id!r} occurs twice; pseudo queries need unique ids")
        corpus[doc.id] = doc.full_text
        split[doc.id] = _unique_sentences(doc.full_text)
    document_frequency = Counter(normalize_text(s) for sentences in split.values() for s in sentences)

    candidates: list[tuple[str, list[int]]] = []
    for doc_id, sentences in split.items():
        if len(sentences) < min_sentences:
            continue
        usable = [
            i
            for i, s in enumerate(sentences)
            if len(s.split()) >= min_query_words and document_frequency[normalize_text(s)] == 1
        ]
        if usable:
            candidates.append((doc_id, usable))
    if not candidates:
        raise InputError(
            f"no document has {min_sentences} or more sentences: pseudo queries need multi-sentence "
            "documents (a file of one sentence per line has none)"
        )

    rng = random.Random(seed)
    chosen = rng.sample(candidates, min(n_queries, len(candidates)))
    position = {doc_id: i for i, doc_id in enumerate(split)}
    chosen.sort(key=lambda item: position[item[0]])  # queries in corpus order, whatever the draw
    queries: list[HeldOutQuery] = []
    for number, (doc_id, usable) in enumerate(chosen):
        sentences = split[doc_id]
        index = rng.choice(usable)
        queries.append(HeldOutQuery(id=f"pq{number}", text=sentences[index], doc_id=doc_id))
        corpus[doc_id] = " ".join(s for i, s in enumerate(sentences) if i != index)
    return PseudoQuerySet(queries=queries, corpus=corpus, seed=seed, eligible_documents=len(candidates))


def evaluate_pseudo(
    encoder: Encoder, pseudo_set: PseudoQuerySet, batch_size: int = 64, progress: bool = False
) -> dict[str, float]:
    """nDCG@10, MRR@10 and Recall@10 (in [0, 1], as `evaluate_retrieval`) of `encoder` on the queries.

    Dense search over every document of the corpus held in memory, by the search pipeline
    (`embedkit.search.pipeline` over `embedkit.evaluation.memory_store`), as `embedkit eval
    retrieval --mode dense` searches: exact cosine, equal scores by doc id, descending. The
    documents are embedded here (`batch_size`, `progress`), the queries by the pipeline.
    """
    documents = [Document(doc_id, text) for doc_id, text in pseudo_set.corpus.items()]
    doc_vectors = encoder.encode(
        [d.text for d in documents], batch_size=batch_size, normalize=True, progress=progress
    )
    depth = max(parse_metric(m)[1] for m in PSEUDO_METRICS)
    request = SearchRequest(depth, mode="dense").resolved({}, has_lexical=False)
    store = MemoryStore(documents, doc_vectors)
    try:
        hits = pipeline.search(store, [q.text for q in pseudo_set.queries], encoder, request, Prefixes())
    finally:
        store.close()
    run = run_of_hits([q.id for q in pseudo_set.queries], hits)
    return evaluate_run(run, pseudo_set.qrels, PSEUDO_METRICS).metrics


class PseudoQueryEvaluator:
    """`evaluate_pseudo` as an `Evaluator`: nDCG@10 (primary), MRR@10 and Recall@10 on pseudo queries."""

    name = "pseudo"
    primary_metric = "ndcg@10"
    greater_is_better = True

    def __init__(self, pseudo_set: PseudoQuerySet, batch_size: int = 64, progress: bool = False) -> None:
        self.pseudo_set = pseudo_set
        self.batch_size = batch_size
        self.progress = progress

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        return evaluate_pseudo(encoder, self.pseudo_set, batch_size=self.batch_size, progress=self.progress)

    def describe(self) -> dict[str, Any]:
        return {
            "pseudo_queries": len(self.pseudo_set.queries),
            "documents": len(self.pseudo_set.corpus),
            "seed": self.pseudo_set.seed,
            "fingerprint": self.pseudo_set.fingerprint,
            "metric": self.primary_metric,
        }
