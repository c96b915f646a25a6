"""BEIR retrieval evaluation: nDCG@10, MRR@10, Recall@k and MAP@100 of an encoder on a BEIR folder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.beir import BeirData, read_beir
from embedkit.encode.prefixes import Prefixes, recorded_prefixes
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.metrics import RETRIEVAL_METRICS, evaluate_run, parse_metric
from embedkit.evaluation.runs import exact_search, feedback_run, fuse_runs, index_search, lexical_run
from embedkit.index.folder import read_index_meta
from embedkit.index.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS
from embedkit.index.search import FUSION_DEPTH, SEARCH_MODES

Run = dict[str, dict[str, float]]  # query id -> doc id -> score


@dataclass(frozen=True)
class RetrievalReport:
    """Mean metrics, each judged query's metrics, and what was searched."""

    metrics: dict[str, float]  # metric name -> mean over judged queries
    per_query: dict[str, dict[str, float]]  # query id -> metric name -> value
    queries: int  # judged queries evaluated
    documents: int  # documents searched
    search: str  # "exact" or the index folder
    fusion: str | None = None  # hybrid: the fusion used ("dense" where a calibration chose no fusion)
    alpha: float | None = None  # hybrid: its dense weight
    fusion_source: str = ""  # hybrid: "asked for", "the index's calibrated choice", "calibrated in memory"


class RetrievalEvaluator:
    """nDCG@10, MRR@10, Recall@1/10/100 and MAP@100 on a BEIR folder, as BEIR computes them.

    Documents are embedded as title + " " + text, queries as their text, both L2-normalised.
    Search is exact inner product (cosine) over all documents; ties in score rank by doc id,
    descending (trec_eval's order), both when choosing the top documents and when scoring them.
    With `index` (a folder from `embedkit index`, or an open `embedkit.index.search.SearchIndex`), that
    index is searched instead: it must hold this corpus, embedded by the encoder's model (its
    fingerprint is checked); ties at the k-th place are then as FAISS returns them.
    `mode`: dense (above), lexical (BM25: the index's own, or one built in memory over the folder's
    corpus with the default settings of `embedkit.index.lexical`), or hybrid (both sides'
    `FUSION_DEPTH` candidates fused with `fusion`, as `embedkit search --mode hybrid` does).
    `fusion` None: what `search` would use, the index's calibrated choice (`embedkit.index.calibration`;
    the default where it has none), or without an index a calibration of the corpus in memory.
    As BEIR's default, a hit whose doc id equals the query id is dropped (`ignore_identical_ids`).
    `prefixes` (`embedkit.encode.prefixes`) go before queries and documents as they are embedded;
    None: an index's recorded ones, or none for exact search. An index of passages is searched
    with `SearchIndex.search_text`, which ranks documents by their best passage.
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
        mode: str = "dense",
        fusion: str | None = DEFAULT_FUSION,  # None: the index's calibrated choice (see above)
        alpha: float | None = DEFAULT_ALPHA,  # None: the calibrated or the default weight
        prefixes: Prefixes | None = None,
    ) -> None:
        if mode not in SEARCH_MODES:
            raise InputError(f"unknown retrieval mode {mode!r}: use {', '.join(SEARCH_MODES)}")
        if fusion is not None and fusion not in FUSION_METHODS:
            raise InputError(f"unknown fusion {fusion!r}: use {', '.join(FUSION_METHODS)}")
        self.mode, self.fusion, self.alpha = mode, fusion, alpha
        self._used: tuple[str, float, str] = ("", 0.0, "")  # the fusion resolved for this evaluation
        self._memory_lexical: Any = None  # the corpus's BM25 index, built once, when needed
        self.beir_dir = Path(beir_dir)
        self.metrics = tuple(metrics)
        self.depth = max(parse_metric(m)[1] for m in self.metrics)  # documents retrieved per query
        self.data: BeirData = read_beir(self.beir_dir, split)
        self.index = index
        self.ignore_identical_ids = ignore_identical_ids
        self.batch_size = batch_size
        self.progress = progress
        self.prefixes = prefixes

    def _prefixes(self) -> Prefixes:
        if self.prefixes is not None or self.index is None:
            return self.prefixes or Prefixes()
        meta = self.index.meta if hasattr(self.index, "meta") else read_index_meta(self.index)
        return recorded_prefixes(meta)

    def evaluate(self, encoder: Encoder) -> RetrievalReport:
        query_ids = list(self.data.queries)
        query_texts = [self.data.queries[q] for q in query_ids]
        exclude = query_ids if self.ignore_identical_ids else None
        # hybrid fuses each side's FUSION_DEPTH candidates; a single side retrieves the metrics' depth
        depth = max(self.depth, FUSION_DEPTH) if self.mode == "hybrid" else self.depth
        query_vectors = None
        prefixes = self._prefixes()
        if self.mode != "lexical":
            query_vectors = encoder.encode(
                prefixes.queries(query_texts),
                batch_size=self.batch_size,
                normalize=True,
                progress=self.progress,
            )

        def finish(dense: Run, lexical: Run, vectors_of: Any, search: Any) -> Run:
            """The mode's run from both sides; prf searches again (`search(vectors, query_ids)`)."""
            if self.mode != "hybrid":
                return dense if self.mode == "dense" else lexical
            fusion, alpha, _ = self._used
            cut = {
                q: dict(sorted(h.items(), key=lambda hit: -hit[1])[: self.depth]) for q, h in dense.items()
            }
            if fusion == "dense":  # the in-memory calibration chose no fusion
                return cut
            if fusion != "prf":
                return fuse_runs(dense, lexical, self.depth, fusion, alpha)
            return feedback_run(cut, lexical, query_ids, query_vectors, vectors_of, search, alpha)

        if self.index is None:
            doc_ids, texts = self.data.document_texts()
            dense: Run = {}
            lexical: Run = {}
            doc_vectors = None
            if query_vectors is not None:
                doc_vectors = encoder.encode(
                    prefixes.passages(texts),
                    batch_size=self.batch_size,
                    normalize=True,
                    progress=self.progress,
                )
                dense = exact_search(query_vectors, doc_vectors, doc_ids, depth, query_ids, exclude)
            if self.mode != "dense":
                rankings = self._corpus_lexical().search(query_texts, depth + (exclude is not None))
                lexical = lexical_run(rankings, doc_ids, query_ids, depth, exclude)
            if self.mode == "hybrid":
                self._used = self._resolve(None, lambda: self._calibrate(encoder, doc_vectors))
            row_of = {doc: row for row, doc in enumerate(doc_ids)}
            run = finish(
                dense,
                lexical,
                lambda ids: doc_vectors[[row_of[i] for i in ids]],
                lambda vectors, qids: exact_search(
                    vectors, doc_vectors, doc_ids, self.depth, qids, qids if exclude is not None else None
                ),
            )
            documents, search = len(doc_ids), "exact"
        else:
            run, documents, search = self._search_index(
                encoder, query_vectors, query_texts, query_ids, exclude, depth, finish
            )
        result = evaluate_run(run, self.data.qrels, self.metrics)
        used = self._used if self.mode == "hybrid" else (None, None, "")
        return RetrievalReport(result.metrics, result.per_query, len(query_ids), documents, search, *used)

    def _resolve(self, index: Any, calibrated: Any = None) -> tuple[str, float, str]:
        """(fusion, dense weight, where they come from) of this hybrid evaluation."""
        if self.fusion is not None:
            return self.fusion, DEFAULT_ALPHA if self.alpha is None else self.alpha, "asked for"
        if index is not None:
            fusion, alpha = index.default_fusion(None, self.alpha)
            return (
                fusion,
                alpha,
                "the index's calibrated choice" if index.meta.get("fusion") else "the default",
            )
        fusion, alpha = calibrated()
        return fusion, alpha if self.alpha is None else self.alpha, "calibrated in memory"

    def _calibrate(self, encoder: Encoder, doc_vectors: np.ndarray) -> tuple[str, float]:
        """What `embedkit index` would record for this corpus (`embedkit.evaluation.calibrate`)."""
        from embedkit.data.corpus import Document
        from embedkit.evaluation.calibrate import calibrate

        documents = [Document(i, d["text"], d["title"]) for i, d in self.data.corpus.items()]
        chosen = calibrate(
            lambda rows: [documents[r] for r in rows],
            lambda rows: doc_vectors[rows],
            len(documents),
            encoder,
            prefixes=self._prefixes(),
        )
        return chosen.method, chosen.alpha

    def _corpus_lexical(self) -> Any:
        """A BM25 index of this folder's corpus in memory (rows in `document_texts` order), built once."""
        if self._memory_lexical is None:
            self._memory_lexical = MemoryLexical(self.data)
        return self._memory_lexical

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        return self.evaluate(encoder).metrics

    def describe(self) -> dict[str, Any]:
        queries = len(self.data.queries)
        return {"beir_dir": str(self.beir_dir), "queries": queries, "metric": self.primary_metric}

    def _search_index(
        self,
        encoder: Encoder,
        query_vectors: np.ndarray | None,
        query_texts: list[str],
        query_ids: list[str],
        exclude: list[str] | None,
        depth: int,
        finish: Any,
    ) -> tuple[Run, int, str]:
        """Search `self.index` (a folder, or an open `SearchIndex`) after checking its model and corpus."""
        if hasattr(self.index, "search"):
            index, opened = self.index, False
            index.check_encoder(encoder)
        else:
            from embedkit.index.search import open_index_for  # needs faiss

            index, opened = open_index_for(self.index, encoder), True
        try:
            self._check_corpus(index)
            if self.mode == "hybrid":
                self._used = self._resolve(index)
            if getattr(index, "passages", False):
                run = self._passage_run(index, encoder, query_texts, query_ids, exclude)
                return run, index.document_count, str(index.path)
            dense: Run = {}
            lexical: Run = {}
            if query_vectors is not None:
                dense = index_search(index, query_vectors, query_ids, depth, exclude)
            if self.mode != "dense":
                if not index.has_lexical:
                    raise InputError(index.no_lexical_reason().replace("search it", "evaluate it"))
                rankings = index.store.search_lexical(query_texts, depth + (exclude is not None))
                rows = list({row for ranking in rankings for row, _ in ranking})
                ids = index.store.ids_of_rows(rows)
                lexical = lexical_run(rankings, ids, query_ids, depth, exclude)
            run = finish(
                dense,
                lexical,
                lambda doc_ids: index.vectors_of_rows(index.store.rows_of_ids(doc_ids), encoder),
                lambda vectors, qids: index_search(
                    index, vectors, qids, self.depth, qids if exclude is not None else None
                ),
            )
            documents, search = len(index), str(index.path)
        finally:
            if opened:
                index.close()
        found = {doc for hits in run.values() for doc in hits} | {d for h in lexical.values() for d in h}
        if found and found.isdisjoint(self.data.corpus):
            raise InputError(
                f"the index {search} holds none of {self.beir_dir}'s documents: built from another corpus?"
            )
        return run, documents, search

    def _passage_run(
        self, index: Any, encoder: Encoder, texts: list[str], query_ids: list[str], exclude: list[str] | None
    ) -> Run:
        """The run of an index of passages: its documents as `search_text` ranks them (best passage)."""
        if self.mode != "dense" and not index.has_lexical:
            raise InputError(index.no_lexical_reason().replace("search it", "evaluate it"))
        fusion, alpha = self._used[:2] if self.mode == "hybrid" else (None, None)
        found = index.search_text(
            texts, k=self.depth + 1, encoder=encoder, mode=self.mode, fusion=fusion, alpha=alpha
        )
        run: Run = {}
        for i, (query_id, hits) in enumerate(zip(query_ids, found, strict=True)):
            kept = [(h.id, h.score) for h in hits if exclude is None or h.id != exclude[i]]
            run[query_id] = dict(kept[: self.depth])
        return run

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


class MemoryLexical:
    """A BM25 index of a BEIR corpus in memory (no index folder needed), rows in corpus order."""

    def __init__(self, data: BeirData) -> None:
        from embedkit.data.corpus import Document
        from embedkit.index.lexical import LexicalIndex

        self.index = LexicalIndex.create(None)
        self.index.add(0, [Document(i, d["text"], d["title"]) for i, d in data.corpus.items()])
        self.index.commit()

    def search(self, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
        return self.index.search(queries, k)
