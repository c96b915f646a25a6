"""The measurements a fusion calibration chooses from: each candidate searched on a task of
pseudo queries and scored, nDCG@10 per query.

A `PseudoTask` is queries with one relevant document each and the searched documents without the
queries' text; `score_task` searches it with BM25 alone and with each candidate of
`embedkit.evaluation.fusion_rule.CANDIDATES`, by the search pipeline itself
(`embedkit.search.pipeline`, over the documents in memory: `embedkit.evaluation.memory_store`),
and gives every query's nDCG@10 per candidate and kind: the table `fusion_rule.choose` reads.
Apart from `embedkit.evaluation.fusion_calibration`, which makes the task from an index's sample
and records the choice, so that benchmarks/calibration.py scores its judged queries by the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.document import Document
from embedkit.encode.caching import RepeatCache
from embedkit.encode.prefixes import Prefixes
from embedkit.encode.protocol import Encoder
from embedkit.evaluation.fusion_rule import CANDIDATES, COMMON, LEXICAL
from embedkit.evaluation.memory_store import MemoryStore
from embedkit.evaluation.metrics import evaluate_run
from embedkit.evaluation.pseudo_kinds import QUERY_KINDS, PseudoQuery
from embedkit.evaluation.runs import Run, run_of_hits
from embedkit.search import pipeline
from embedkit.search.fusion import DEFAULT_ALPHA
from embedkit.search.request import SearchRequest, label

if TYPE_CHECKING:
    from embedkit.evaluation.passage_sample import PassageSample

DEPTH = 100  # the single sides' runs, as deep as each side's candidates before fusion (FUSION_DEPTH)
TOP = 10  # the fused runs: nDCG@10 reads no further


@dataclass(frozen=True)
class PseudoTask:
    """Queries with one relevant document each, and the searched sample without the queries' text."""

    queries: list[PseudoQuery]  # source = the row in `documents`
    documents: list[Document]  # searched: a query's source holds its `positive` text
    changed: list[int]  # rows whose text a query changed (their vectors must be embedded again)

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return {f"q{i}": {self.documents[q.source].id: 1} for i, q in enumerate(self.queries)}


def candidate_requests() -> dict[str, SearchRequest]:
    """BM25 alone (`LEXICAL`) and each candidate of `CANDIDATES`, as search requests."""
    requests = {LEXICAL: SearchRequest(DEPTH, mode="lexical")}
    for method, alpha in CANDIDATES:
        if method == "dense":
            requests[label(method, alpha)] = SearchRequest(DEPTH, mode="dense")
        else:
            weight = DEFAULT_ALPHA if alpha is None else alpha
            requests[label(method, alpha)] = SearchRequest(TOP, mode="hybrid", fusion=method, alpha=weight)
    return {name: request.resolved({}, has_lexical=True) for name, request in requests.items()}


def candidate_runs(
    store: MemoryStore,
    texts: list[str],
    encoder: Encoder,
    prefixes: Prefixes,
    exclude: Sequence[str] | None = None,  # per query, a doc id it must not find (`SearchRequest`)
) -> dict[str, Run]:
    """Each candidate's run (and BM25's) of the queries `texts` (`q0`, `q1`, ...), by the search pipeline."""
    query_ids = [f"q{i}" for i in range(len(texts))]
    encoder = RepeatCache(encoder)  # every candidate embeds the same queries: once
    runs = {}
    for name, request in candidate_requests().items():
        model = encoder if request.mode != "lexical" else None
        asked = replace(request, exclude=exclude)
        runs[name] = run_of_hits(query_ids, pipeline.search(store, texts, model, asked, prefixes))
    return runs


def per_query_ndcg(runs: dict[str, Run], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """candidate -> query id -> nDCG@10 (in [0, 1])."""
    return {
        name: {q: m["ndcg@10"] for q, m in evaluate_run(run, qrels, ("ndcg@10",)).per_query.items()}
        for name, run in runs.items()
    }


def score_task(
    task: PseudoTask,
    vectors: np.ndarray,
    encoder: Encoder,
    lexical_settings: Any = None,
    prefixes: Prefixes | None = None,  # the index's query and passage prefixes (none: no prefix)
    passages: PassageSample | None = None,  # the sample's passages, in an index of passages
) -> dict[str, dict[str, list[float]]]:
    """candidate -> kind -> nDCG@10 x 100 of each of the task's queries of that kind, in task order;
    `vectors` are the sample's stored vectors (unused where `passages` holds them)."""
    prefixes = prefixes or Prefixes()
    if passages is not None:  # an index of passages: documents ranked by their best passage
        units, unit_vectors, numbers = passages.searched(task.documents, task.changed, encoder, prefixes)
        store = MemoryStore(units, unit_vectors, lexical_settings, numbers)
    else:
        doc_vectors = np.array(vectors, dtype=np.float32)
        if task.changed:  # the sources without their query's text, embedded as the index would
            texts = prefixes.passages([task.documents[row].full_text for row in task.changed])
            doc_vectors[task.changed] = encoder.encode(texts, normalize=True)
        store = MemoryStore(task.documents, doc_vectors, lexical_settings)
    try:
        texts = [q.text for q in task.queries]
        scores = per_query_ndcg(candidate_runs(store, texts, encoder, prefixes), task.qrels)
    finally:
        store.close()
    query_ids = [f"q{i}" for i in range(len(task.queries))]
    kinds = sorted({q.kind for q in task.queries}, key=(*QUERY_KINDS, COMMON).index)
    return {
        name: {
            kind: [
                100 * values[qid] for qid, q in zip(query_ids, task.queries, strict=True) if q.kind == kind
            ]
            for kind in kinds
        }
        for name, values in scores.items()
    }
