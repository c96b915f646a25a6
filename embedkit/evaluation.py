"""Evaluate an encoder on STS pairs and on BEIR retrieval: the thin layer between a model and
the metric math of `embedkit.metrics`.

Evaluators share one small interface, as sentence-transformers' do: build one with the data,
call it with an encoder, get `dict[str, float]`; `primary_metric` names the headline key.

>>> from embedkit.encoder import load_encoder  # doctest: +SKIP
>>> StsEvaluator(["stsb-test.tsv"])(load_encoder())  # doctest: +SKIP
{'stsb-test/spearman_cosine': 82.03..., 'spearman_cosine': 82.03...}

An encoder is anything with `encode(texts, batch_size=, normalize=, progress=) -> float32 [n, dim]`
and a `fingerprint` (`embedkit.encoder.load_encoder`, `TorchEncoder`). No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.datasets import STS_FORMATS, BeirData, read_beir, read_sts
from embedkit.errors import InputError
from embedkit.metrics import RETRIEVAL_METRICS, evaluate_run, parse_metric, spearman

STS_METRIC = "spearman_cosine"
SEARCH_CHUNK = 16384  # documents scored at once; a 1024 x 16384 float32 block is 64 MiB
QUERY_BLOCK = 1024  # queries scored at once


@dataclass(frozen=True)
class StsFileResult:
    """One STS file's score: Spearman x 100 of cosine similarity against the gold scores."""

    path: Path
    name: str  # the file's name without format suffixes, the key prefix in the results dict
    pairs: int
    spearman_cosine: float


class StsEvaluator:
    """Spearman x 100 of cosine similarity vs gold scores per file, and the mean over files.

    One correlation over all pairs of a file (SentEval's "all" setting, as SimCSE and miCSE
    report STS). The files are read when the evaluator is built, so bad input fails early.
    """

    primary_metric = STS_METRIC

    def __init__(
        self, paths: str | Path | Sequence[str | Path], batch_size: int = 64, progress: bool = False
    ):
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not paths:
            raise InputError("no STS files given")
        self.paths = [Path(p) for p in paths]
        self.data = [read_sts(p) for p in self.paths]
        self.names = _file_names(self.paths)
        self.batch_size = batch_size
        self.progress = progress

    def evaluate(self, encoder: Any) -> list[StsFileResult]:
        results = []
        for path, name, data in zip(self.paths, self.names, self.data, strict=True):
            # Encoding both columns in one call lets length-sorting batch them together.
            vectors = encoder.encode(
                data.sentences1 + data.sentences2,
                batch_size=self.batch_size,
                normalize=True,
                progress=self.progress,
            )
            first, second = vectors[: len(data)], vectors[len(data) :]
            cosine = np.einsum("ij,ij->i", first.astype(np.float64), second.astype(np.float64))
            results.append(StsFileResult(path, name, len(data), 100.0 * spearman(cosine, data.scores)))
        return results

    def __call__(self, encoder: Any) -> dict[str, float]:
        results = self.evaluate(encoder)
        scores = {f"{r.name}/{STS_METRIC}": r.spearman_cosine for r in results}
        scores[STS_METRIC] = float(np.mean([r.spearman_cosine for r in results]))
        return scores


def _file_names(paths: list[Path]) -> list[str]:
    """`stsb-test` for `.../stsb-test.tsv.gz`; the full path where two files share a name."""
    names = []
    for path in paths:
        name = path.name
        for suffix in (".gz", *STS_FORMATS):
            if name.lower().endswith(suffix):
                name = name[: -len(suffix)]
        names.append(name)
    if len(set(names)) < len(names):
        return [str(p) for p in paths]
    return names


def evaluate_sts(
    encoder: Any, paths: str | Path | Sequence[str | Path], batch_size: int = 64
) -> dict[str, float]:
    """`StsEvaluator(paths)(encoder)`: per-file `<name>/spearman_cosine` and their mean `spearman_cosine`."""
    return StsEvaluator(paths, batch_size=batch_size)(encoder)


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
    With `index` (a folder from `embedkit index`, or an open `embedkit.index.SearchIndex`), that
    index is searched instead: it must hold this corpus, embedded by the encoder's model (its
    fingerprint is checked); ties at the k-th place are then as FAISS returns them.
    As BEIR's default, a hit whose doc id equals the query id is dropped (`ignore_identical_ids`).
    Queries without relevant documents count as 0 (see `embedkit.metrics`).
    """

    primary_metric = "ndcg@10"

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

    def evaluate(self, encoder: Any) -> RetrievalReport:
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

    def __call__(self, encoder: Any) -> dict[str, float]:
        return self.evaluate(encoder).metrics

    def _search_index(
        self, encoder: Any, query_vectors: np.ndarray, query_ids: list[str], exclude: list[str] | None
    ) -> tuple[dict[str, dict[str, float]], int, str]:
        """Search `self.index` (a folder, or an open `SearchIndex`) after checking its model."""
        if hasattr(self.index, "search"):
            index, opened = self.index, False
            index.check_encoder(encoder)
        else:
            from embedkit.index import open_index_for  # needs faiss

            index, opened = open_index_for(self.index, encoder), True
        try:
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


def evaluate_retrieval(
    encoder: Any,
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


def exact_search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    k: int,
    query_ids: Sequence[str],
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """The top `k` documents of each query by inner product, as a run `{query_id: {doc_id: score}}`.

    Scores are computed in blocks (`QUERY_BLOCK` x `SEARCH_CHUNK`) to bound memory. Among equal
    scores the larger doc id wins, so the chosen set matches the order the metrics rank by.
    `exclude[i]`, if given, is a doc id that query i must not retrieve (BEIR's identical ids).
    """
    queries = _matrix(query_vectors, "query vectors")
    docs = _matrix(doc_vectors, "document vectors")
    if queries.shape[1] != docs.shape[1]:
        raise InputError(f"query vectors have dim {queries.shape[1]}, document vectors {docs.shape[1]}")
    if len(doc_ids) != len(docs) or len(query_ids) != len(queries):
        raise InputError("exact_search: one id per vector is needed")
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    # tie_rank[j]: doc j's position when ids are sorted descending; lower wins a tie.
    tie_rank = np.empty(len(doc_ids), dtype=np.int64)
    tie_rank[sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)] = np.arange(len(doc_ids))
    position = {doc: j for j, doc in enumerate(doc_ids)}
    excluded = np.array(
        [position.get(d, -1) for d in exclude] if exclude is not None else [-1] * len(queries)
    )
    run: dict[str, dict[str, float]] = {}
    for q0 in range(0, len(queries), QUERY_BLOCK):
        block = queries[q0 : q0 + QUERY_BLOCK]
        best_scores = np.empty((len(block), 0), dtype=np.float32)
        best_docs = np.empty((len(block), 0), dtype=np.int64)
        for d0 in range(0, len(docs), SEARCH_CHUNK):
            scores = block @ docs[d0 : d0 + SEARCH_CHUNK].T  # (Q, D)
            offsets = excluded[q0 : q0 + len(block)] - d0  # excluded doc's column in this chunk
            rows = np.flatnonzero((offsets >= 0) & (offsets < scores.shape[1]))
            scores[rows, offsets[rows]] = -np.inf
            candidates = np.broadcast_to(np.arange(d0, d0 + scores.shape[1]), scores.shape)
            best_scores = np.concatenate([best_scores, scores], axis=1)
            best_docs = np.concatenate([best_docs, candidates], axis=1)
            best_scores, best_docs = _top_k(best_scores, best_docs, tie_rank, k)
        for r in range(len(block)):
            keep = np.isfinite(best_scores[r])
            run[query_ids[q0 + r]] = {
                doc_ids[j]: float(s) for j, s in zip(best_docs[r][keep], best_scores[r][keep], strict=True)
            }
    return run


def _top_k(
    scores: np.ndarray, docs: np.ndarray, tie_rank: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best (score descending, then tie_rank ascending), in that order."""
    if scores.shape[1] > k:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
        # argpartition picks among scores equal to the k-th arbitrarily: redo those rows exactly.
        for r in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k):
            candidates = np.flatnonzero(scores[r] >= kth[r])
            order = np.lexsort((tie_rank[docs[r, candidates]], -scores[r, candidates]))
            part[r] = candidates[order[:k]]
        scores = np.take_along_axis(scores, part, axis=1)
        docs = np.take_along_axis(docs, part, axis=1)
    order = np.lexsort((tie_rank[docs], -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(docs, order, axis=1)


def _matrix(vectors: np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D array, got shape {array.shape}")
    return np.ascontiguousarray(array)


def index_search(
    index: Any,
    query_vectors: np.ndarray,
    query_ids: Sequence[str],
    k: int,
    exclude: Sequence[str] | None = None,
) -> dict[str, dict[str, float]]:
    """A run from a search index; one extra hit is fetched per query so that dropping its own id leaves k."""
    scores, ids = index.search(query_vectors, k + 1 if exclude is not None else k)
    run: dict[str, dict[str, float]] = {}
    for i, query_id in enumerate(query_ids):
        hits = [
            (doc, float(s)) for doc, s in zip(ids[i], scores[i], strict=True) if doc is not None and doc != ""
        ]
        if exclude is not None:
            hits = [(doc, s) for doc, s in hits if doc != exclude[i]]
        run[query_id] = dict(hits[:k])
    return run
