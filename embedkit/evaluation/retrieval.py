"""BEIR retrieval evaluation: nDCG@10, MRR@10, Recall@k and MAP@100 of an encoder on a BEIR folder.

The run is what the search pipeline returns (`embedkit.search.pipeline`), over an index or over
the folder's corpus held in memory (`embedkit.evaluation.memory_store`), so what is measured is
what `embedkit search` runs; only the scoring is this module's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from embedkit.data.beir import BeirData, read_beir
from embedkit.data.document import Document
from embedkit.encode.prefixes import Prefixes
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.memory_store import MemoryStore
from embedkit.evaluation.metrics import RETRIEVAL_METRICS, evaluate_run, parse_metric
from embedkit.evaluation.runs import run_of_hits
from embedkit.index.search import SearchIndex, open_index_for
from embedkit.search import pipeline
from embedkit.search.fusion import DEFAULT_ALPHA
from embedkit.search.request import SearchRequest, check_choices, default_mode, fusion_for
from embedkit.search.rerank import DEFAULT_RERANK_DEPTH, PairScorer, Rerank
from embedkit.search.store import SearchStore


@dataclass(frozen=True)
class RetrievalReport:
    """Mean metrics, each judged query's metrics, and what was searched."""

    metrics: dict[str, float]  # metric name -> mean over judged queries
    per_query: dict[str, dict[str, float]]  # query id -> metric name -> value
    queries: int  # judged queries evaluated
    documents: int  # documents searched
    search: str  # "exact" or the index folder
    mode: str = "dense"  # the mode evaluated: asked for, else what `embedkit search` runs
    fusion: str | None = None  # hybrid: the fusion used ("dense" where a calibration chose no fusion)
    alpha: float | None = None  # hybrid: its dense weight
    fusion_source: str = ""  # hybrid: "asked for", "the index's calibrated choice", "calibrated in memory"
    run: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # query id -> doc id -> score: what was scored


class RetrievalEvaluator:
    """nDCG@10, MRR@10, Recall@1/10/100 and MAP@100 on a BEIR folder, as BEIR computes them.

    Documents are embedded as title + " " + text, queries as their text, both L2-normalised.
    Search is exact inner product (cosine) over all documents; ties in score rank by doc id,
    descending (trec_eval's order), both when choosing the top documents and when scoring them.
    With `index` (a folder from `embedkit index`, or an open `embedkit.index.search.SearchIndex`), that
    index is searched instead: it must hold this corpus, embedded by the encoder's model (its
    fingerprint is checked); ties at the k-th place are then as FAISS returns them.
    `mode`: dense (above), lexical (BM25: the index's own, or one built in memory over the folder's
    corpus with the default settings of `embedkit.index.lexical`), or hybrid (both fused with
    `fusion`): every mode is the search pipeline's, as `embedkit search --mode M` runs it. `mode`
    None (the default): what `embedkit search` runs without `--mode` (the index's default; without
    an index, hybrid), so that an evaluation with no settings measures what users search with.
    `fusion` None: what `search` would use, the index's calibrated choice (`embedkit.search.request`;
    the default where it has none), or without an index a calibration of the corpus in memory.
    As BEIR's default, the document whose id equals the query id is left out of each search side
    (`ignore_identical_ids`: `SearchRequest.exclude`). `prefixes` (`embedkit.encode.prefixes`) go
    before queries and documents as they are embedded for exact search (None: none); an index
    embeds with its recorded ones. An index of passages ranks documents by their best passage.
    Queries without relevant documents count as 0 (see `embedkit.evaluation.metrics`).
    `rerank`: a cross-encoder re-orders each query's first `rerank_depth` hits
    (`embedkit.search.rerank`), the stage `embedkit search --rerank` runs.
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
        mode: str | None = None,  # None: what `embedkit search` runs (see above)
        fusion: str | None = None,  # None: the index's calibrated choice (see above)
        alpha: float | None = None,  # None: the calibrated or the default weight
        prefixes: Prefixes | None = None,
        rerank: PairScorer | None = None,  # a cross-encoder over each query's first hits (None: none)
        rerank_depth: int = DEFAULT_RERANK_DEPTH,
    ) -> None:
        check_choices(mode, fusion, alpha)
        self.mode, self.fusion, self.alpha = mode, fusion, alpha
        self._used: tuple[str, float, str] = ("", 0.0, "")  # the fusion resolved for this evaluation
        self.beir_dir = Path(beir_dir)
        self.metrics = tuple(metrics)
        self.depth = max(parse_metric(m)[1] for m in self.metrics)  # documents retrieved per query
        self.data: BeirData = read_beir(self.beir_dir, split)
        self.index = index
        self.ignore_identical_ids = ignore_identical_ids
        self.batch_size = batch_size
        self.progress = progress
        self.prefixes = prefixes
        self.rerank, self.rerank_depth = rerank, rerank_depth

    def evaluate(self, encoder: Encoder) -> RetrievalReport:
        query_ids = list(self.data.queries)
        texts = [self.data.queries[q] for q in query_ids]
        exclude = query_ids if self.ignore_identical_ids else None
        store: SearchStore[Any]
        if self.index is None:
            store, prefixes = self._memory_store(encoder), self.prefixes or Prefixes()
            index, where = None, "exact"
        else:
            index = self._opened(encoder)
            store, prefixes, where = index.store, index.prefixes, str(index.path)
        try:
            mode = self._mode(index)
            request = self._request(mode, index, encoder, store, exclude)
            model = encoder if request.mode != "lexical" else None
            run = run_of_hits(query_ids, pipeline.search(store, texts, model, request, prefixes))
            documents = store.document_count()
        finally:
            if index is not None and index is not self.index:
                index.close()
            elif index is None:
                store.close()
        found = {doc for hits in run.values() for doc in hits}
        if index is not None and found and found.isdisjoint(self.data.corpus):
            raise InputError(
                f"the index {where} holds none of {self.beir_dir}'s documents: built from another corpus?"
            )
        result = evaluate_run(run, self.data.qrels, self.metrics)
        used = self._used if mode == "hybrid" else (None, None, "")
        report = RetrievalReport(
            result.metrics, result.per_query, len(query_ids), documents, where, mode, *used
        )
        return replace(report, run=run)

    def _opened(self, encoder: Encoder) -> SearchIndex:
        """`self.index` open (a folder is opened here, an open one is used as it is), checked to
        hold this corpus embedded by `encoder`'s model."""
        if isinstance(self.index, SearchIndex):
            index = self.index
            index.check_encoder(encoder)
        else:
            index = open_index_for(self.index, encoder)
        try:
            self._check_corpus(index)
        except BaseException:
            if index is not self.index:
                index.close()
            raise
        return index

    def _memory_store(self, encoder: Encoder) -> MemoryStore:
        """The folder's corpus in memory (rows in corpus order), embedded unless only BM25 is asked."""
        documents = [Document(i, d["text"], d["title"]) for i, d in self.data.corpus.items()]
        if self.mode == "lexical":
            return MemoryStore(documents)
        _, texts = self.data.document_texts()
        vectors = encoder.encode(
            (self.prefixes or Prefixes()).passages(texts),
            batch_size=self.batch_size,
            normalize=True,
            progress=self.progress,
        )
        return MemoryStore(documents, vectors)

    def _mode(self, index: Any) -> str:
        """The mode asked for, else what `embedkit search` runs: the index's default
        (`embedkit.search.request.default_mode`), without an index hybrid (what `embedkit index`
        then `search` gives this corpus)."""
        if self.mode is not None:
            return self.mode
        return default_mode(index.meta, index.has_lexical, self.fusion) if index is not None else "hybrid"

    def _request(
        self, mode: str, index: Any, encoder: Encoder, store: Any, exclude: list[str] | None
    ) -> SearchRequest:
        """The search this evaluation runs: `self.depth` hits a query, in `mode`, with the fusion
        resolved (`_resolve`); the calibration's "dense" searches dense."""
        if mode == "hybrid":
            self._used = self._resolve(index, lambda: self._calibrate(encoder, store))
            if self._used[0] == "dense":  # the in-memory calibration chose no fusion
                mode = "dense"
        fusion, alpha = (self._used[0], self._used[1]) if mode == "hybrid" else (None, None)
        request = SearchRequest(self.depth, mode=mode, fusion=fusion, alpha=alpha, exclude=exclude)
        meta = index.meta if index is not None else {}
        reason = index.no_lexical_reason().replace("search it", "evaluate it") if index is not None else ""
        request = request.resolved(meta, store.has_lexical, reason)
        if self.rerank is not None:  # the first hits re-ranked, as `search --rerank` does
            request = Rerank(self.rerank, self.rerank_depth, request.k).request(request)
        return request

    def _resolve(self, index: SearchIndex | None, calibrated: Any) -> tuple[str, float, str]:
        """(fusion, dense weight, where they come from) of this hybrid evaluation."""
        if self.fusion is not None:
            return self.fusion, DEFAULT_ALPHA if self.alpha is None else self.alpha, "asked for"
        if index is not None:
            fusion, alpha = fusion_for(index.meta, None, self.alpha)
            return (
                fusion,
                alpha,
                "the index's calibrated choice" if index.meta.get("fusion") else "the default",
            )
        fusion, alpha = calibrated()
        return fusion, alpha if self.alpha is None else self.alpha, "calibrated in memory"

    def _calibrate(self, encoder: Encoder, store: MemoryStore) -> tuple[str, float]:
        """What `embedkit index` would record for this corpus (`embedkit.evaluation.fusion_calibration`)."""
        from embedkit.evaluation.fusion_calibration import calibrate

        chosen = calibrate(store, range(store.document_count()), encoder, prefixes=self.prefixes)
        return chosen.method, chosen.alpha

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        return self.evaluate(encoder).metrics

    def describe(self) -> dict[str, Any]:
        queries = len(self.data.queries)
        return {"beir_dir": str(self.beir_dir), "queries": queries, "metric": self.primary_metric}

    def _check_corpus(self, index: SearchIndex) -> None:
        """The index must hold exactly this folder's corpus: its recorded fingerprint must match."""
        from embedkit.index.corpus_fingerprint import beir_corpus_fingerprint

        recorded = index.meta.get("corpus_fingerprint")
        if recorded is None:
            return  # an index from before fingerprints: only the disjoint-ids check applies
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
    mode: str | None = None,
) -> dict[str, float]:
    """`RetrievalEvaluator(beir_dir, ...)(encoder)`: the metrics averaged over judged queries, in
    `mode` (None: what `embedkit search` runs)."""
    evaluator = RetrievalEvaluator(
        beir_dir,
        split=split,
        index=index,
        ignore_identical_ids=ignore_identical_ids,
        batch_size=batch_size,
        mode=mode,
    )
    return evaluator(encoder)
