"""The search pipeline's stages on a corpus held in memory, against brute-force references.

Exclusion (BEIR's identical ids): each side ranks the collection without the excluded document,
then fusion, exactly as brute force over the smaller collection. The re-ranking stage runs last,
on hits with their documents. prf reads the stored vectors, and a store that cannot read them
back gets the same ranking from the documents embedded again.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedkit.data.document import Document
from embedkit.encode.prefixes import Prefixes
from embedkit.encode.protocol import EncoderBase
from embedkit.evaluation.memory_store import MemoryStore
from embedkit.search import pipeline
from embedkit.search.fusion import fuse
from embedkit.search.request import SearchRequest

WORDS = ["shock", "wave", "wing", "flow", "heat", "shell", "noise", "jet", "layer", "stall"]
QUERIES = ["shock wave on a wing", "heat in a shell", "jet noise", "flow over a stall"]


class TableEncoder(EncoderBase):
    """Texts to fixed unit vectors: every text's vector is a function of the text alone."""

    dim = 8

    def encode_texts(self, texts, batch_size, normalize, progress) -> np.ndarray:
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(self.dim) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def corpus() -> tuple[list[Document], np.ndarray, TableEncoder]:
    rng = np.random.default_rng(3)
    documents = [
        Document(f"d{i}", " ".join(rng.choice(WORDS, size=3 + i % 5)), title=str(rng.choice(WORDS)))
        for i in range(30)
    ]
    encoder = TableEncoder()
    return documents, encoder.encode([d.full_text for d in documents], normalize=True), encoder


def request(**settings) -> SearchRequest:
    return SearchRequest(**settings).resolved({}, has_lexical=True)


def brute_dense(scores: np.ndarray, keep: list[int], k: int) -> list[tuple[int, float]]:
    """The best `k` of the `keep` rows by `scores` (ties: the larger id first, as exact search)."""
    order = sorted(keep, key=lambda r: (-scores[r], -int(r)))[:k]
    return [(r, float(scores[r])) for r in order]


@pytest.mark.parametrize("fusion", ["zscore", "rrf", "minmax"])
def test_an_excluded_document_is_left_out_of_each_side_before_fusion(corpus, fusion: str) -> None:
    documents, vectors, encoder = corpus
    exclude = ["d0", "d5", "d10", "d15"]  # one per query: BEIR's identical ids
    store = MemoryStore(documents, vectors)
    hits = pipeline.search(
        store, QUERIES, encoder, request(k=8, mode="hybrid", fusion=fusion, exclude=exclude), Prefixes()
    )
    scores = encoder.encode(QUERIES, normalize=True) @ vectors.T  # every query against every document
    for q, found in enumerate(hits):
        keep = [i for i, d in enumerate(documents) if d.id != exclude[q]]
        dense = brute_dense(scores[q], keep, 100)
        every = store.search_lexical([QUERIES[q]], len(documents), None)[0]  # the whole collection's BM25
        lexical = [(r, s) for r, s in every if r in keep][:100]
        expected = fuse(dense, lexical, 8, method=fusion, alpha=0.7) if lexical else None
        if expected is None:
            assert [h.id for h in found] == [documents[r].id for r, _ in dense[:8]]
            continue
        assert [(h.id, h.score) for h in found] == [(documents[f.row].id, f.score) for f in expected]
        assert exclude[q] not in {h.id for h in found}


def test_the_reranking_stage_runs_last_on_hits_with_documents(corpus) -> None:
    documents, vectors, encoder = corpus
    store = MemoryStore(documents, vectors)
    seen = []

    def reverse(queries, hits):
        seen.append((list(queries), [[h.document is not None for h in found] for found in hits]))
        return [list(reversed(found)) for found in hits]

    plain = pipeline.search(store, QUERIES, encoder, request(k=5, mode="hybrid"), Prefixes())
    reranked = pipeline.search(
        store, QUERIES, encoder, request(k=5, mode="hybrid", rerank=reverse), Prefixes()
    )
    assert reranked == [list(reversed(found)) for found in plain]
    assert seen == [(QUERIES, [[True] * len(found) for found in plain])]


def test_prf_embeds_what_a_store_cannot_read_back(corpus) -> None:
    documents, vectors, encoder = corpus

    class Unreadable(MemoryStore):
        def vectors_of_rows(self, rows):
            return None  # as a GPU index: the documents are embedded again

    settings = request(k=6, mode="hybrid", fusion="prf")
    stored = pipeline.search(MemoryStore(documents, vectors), QUERIES, encoder, settings, Prefixes())
    embedded = pipeline.search(Unreadable(documents, vectors), QUERIES, encoder, settings, Prefixes())
    assert [[(h.id, h.score) for h in found] for found in embedded] == [
        [(h.id, h.score) for h in found] for found in stored
    ]
