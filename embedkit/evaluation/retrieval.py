"""BEIR retrieval evaluation: nDCG@10, MRR@10, Recall@k and MAP@100 of an encoder on a BEIR folder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.beir import BeirData, read_beir
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.metrics import RETRIEVAL_METRICS, evaluate_run, parse_metric
from embedkit.evaluation.runs import exact_search, index_search


@dataclass(frozen=True)
class RetrievalReport:
    """Mean metrics, each judged query's metrics, and what was searched."""

    metrics: dict[str, float]  # metric name -> mean over judged queries
    per_query: dict[str, dict[str, float]]  # query id -> metric name -> value
    queries: int  # judged queries evaluated
    documents: int  # documents searched
    search: str  # "exact" or the index folder


class RetrievalEvaluator:
    """nDCG@10, MRR@10, Recall@1/10/100 and MAP@100 on a BEIR folder, as BEIR computes them.

    Documents are embedded as title + " " + text, queries as their text, both L2-normalised.
    Search is exact inner product (cosine) over all documents; ties in score rank by doc id,
    descending (trec_eval's order), both when choosing the top documents and when scoring them.
    With `index` (a folder from `embedkit index`, or an open `embedkit.index.search.SearchIndex`), that
    index is searched instead: it must hold this corpus, embedded by the encoder's model (its
    fingerprint is checked); ties at the k-th place are then as FAISS returns them.
    As BEIR's default, a hit whose doc id equals the query id is dropped (`ignore_identical_ids`).
    Queries without relevant documents count as 0 (see `embedkit.evaluation.metrics`).
    """

    name = "retrieval"
    primary_metric = "ndcg@10"
    greater_is_better = True

    def __init__(
        self,
        beir_dir: str | Path,
        split: str = "test",
        index: Any = None,
        ignore_identical_ids: bool = True,
        metrics: Sequence[str] = RETRIEVAL_METRICS,
        batch_size: int = 64,
        progress: bool = False,
    ) -> None:
        self.beir_dir = Path(beir_dir)
        self.metrics = tuple(metrics)
        self.depth = max(parse_metric(m)[1] for m in self.metrics)  # documents retrieved per query
        self.data: BeirData = read_beir(self.beir_dir, split)
        self.index = index
        self.ignore_identical_ids = ignore_identical_ids
        self.batch_size = batch_size
        self.progress = progress

    def evaluate(self, encoder: Encoder) -> RetrievalReport:
        query_ids = list(self.data.queries)
        query_vectors = encoder.encode(
            [self.data.queries[q] for q in query_ids],
            batch_size=self.batch_size,
            normalize=True,
            progress=self.progress,
        )
        exclude = query_ids if self.ignore_identical_ids else None
        if self.index is None:
            doc_ids, texts = self.data.document_texts()
            doc_vectors = encoder.encode(
                texts, batch_size=self.batch_size, normalize=True, progress=self.progress
            )
            run = exact_search(query_vectors, doc_vectors, doc_ids, self.depth, query_ids, exclude)
            documents, search = len(doc_ids), "exact"
        else:
            run, documents, search = self._search_index(encoder, query_vectors, query_ids, exclude)
        result = evaluate_run(run, self.data.qrels, self.metrics)
        return RetrievalReport(result.metrics, result.per_query, len(query_ids), documents, search)

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        return self.evaluate(encoder).metrics

    def describe(self) -> dict[str, Any]:
        queries = len(self.data.queries)
        return {"beir_dir": str(self.beir_dir), "queries": queries, "metric": self.primary_metric}

    def _search_index(
        self, encoder: Encoder, query_vectors: np.ndarray, query_ids: list[str], exclude: list[str] | None
    ) -> tuple[dict[str, dict[str, float]], int, str]:
        """Search `self.index` (a folder, or an open `SearchIndex`) after checking its model."""
        if hasattr(self.index, "search"):
            index, opened = self.index, False
            index.check_encoder(encoder)
        else:
            from embedkit.index.search import open_index_for  # needs faiss

            index, opened = open_index_for(self.index, encoder), True
        try:
            self._check_corpus(index)
            run = index_search(index, query_vectors, query_ids, self.depth, exclude)
            documents, search = len(index), str(index.path)
        finally:
            if opened:
                index.close()
        found = {doc for hits in run.values() for doc in hits}
        if found and found.isdisjoint(self.data.corpus):
            raise InputError(
                f"the index {search} holds none of {self.beir_dir}'s documents: built from another corpus?"
            )
        return run, documents, search


    def _check_corpus(self, index: Any) -> None:
        """The index must hold exactly this folder's corpus: its recorded fingerprint must match."""
        from embedkit.index.corpus_fingerprint import beir_corpus_fingerprint

        recorded = index.meta.get("corpus_fingerprint")
        if recorded is None:
            return  # an index from before fingerprints: only the disjoint-ids check below applies
        if recorded != beir_corpus_fingerprint(self.data.corpus):
            raise InputError(
                f"the index {index.path} was not built from {self.beir_dir}'s corpus (its corpus fingerprint "
                "differs): build the index from this folder, or evaluate without --index"
            )


def evaluate_retrieval(
    encoder: Encoder,
    beir_dir: str | Path,
    index: Any = None,
    split: str = "test",
    ignore_identical_ids: bool = True,
    batch_size: int = 64,
) -> dict[str, float]:
    """`RetrievalEvaluator(beir_dir, ...)(encoder)`: the metrics averaged over judged queries."""
    evaluator = RetrievalEvaluator(
        beir_dir, split=split, index=index, ignore_identical_ids=ignore_identical_ids, batch_size=batch_size
    )
    return evaluator(encoder)

