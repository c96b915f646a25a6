"""Hybrid retrieval quality: dense, BM25 and fusion choices, with the bundled all-MiniLM-L6-v2.

1. BEIR collections (test qrels), Cranfield (BM25-friendly) and msmarco-5k (the model is in-domain,
   BM25 far behind): documents embedded as title + " " + text (as the index build does), queries as
   their text; dense = exact cosine search; lexical = `embedkit.index.lexical` (tantivy BM25); both
   sides `--depth` candidates; fused with `embedkit.search.fusion`. nDCG@10 and Recall@100 with
   `embedkit.evaluation.metrics`.
2. STS-B test, the DiffCSE retrieval protocol (`embedkit.evaluation.sts_retrieval`), leaving out the
   query's own row and, second, every row of the query's text: Recall@1/5/10 of the dense model,
   BM25 and the fusions on the same task, a third data set for the choice of a default fusion.

Fusions: RRF (k=60); z-score and min-max at dense weight alpha;
and dense pseudo-relevance feedback (`prf`, the default: Rocchio on the query vector from the top
z-score hits, then dense search again), with its first ranking at several dense weights.

    python benchmarks/hybrid.py --cache /tmp/hybrid-cache --json hybrid.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.evaluation.metrics import evaluate_run
from embedkit.evaluation.sts_retrieval import rank_rows, recall_from_rankings, sts_retrieval_task
from embedkit.index.lexical import LexicalIndex
from embedkit.search.exact import exact_top_k
from embedkit.search.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, PRF_DOCS, feedback_query, fuse

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COLLECTIONS = ("cranfield", "msmarco-5k")
ALPHAS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9)
FUSIONS = [
    ("rrf", None),
    *(("zscore", a) for a in ALPHAS),
    ("minmax", 0.5),
    ("minmax", 0.7),
]

Ranking = list[list[tuple[int, float]]]


@dataclass(frozen=True)
class Doc:
    title: str
    text: str


def embed(encoder, texts: list[str], cache: Path | None, name: str) -> np.ndarray:
    path = cache / f"{name}.npy" if cache else None
    if path is not None and path.is_file():
        return np.load(path)
    start = time.perf_counter()
    vectors = encoder.encode(texts, batch_size=64, normalize=True)
    print(f"embedded {len(texts)} {name} texts in {time.perf_counter() - start:.0f} s")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


def dense_rankings(queries: np.ndarray, docs: np.ndarray, depth: int) -> Ranking:
    """Exact cosine top `depth`, ties by row ascending."""
    scores, rows = exact_top_k(queries, docs, depth)
    return [
        [(int(r), float(s)) for r, s in zip(line_rows, line, strict=True)]
        for line_rows, line in zip(rows, scores, strict=True)
    ]


def lexical_rankings(docs: list[Doc], queries: list[str], depth: int) -> Ranking:
    index = LexicalIndex.create(None)
    index.add(0, docs)
    index.commit()
    return index.search(queries, depth)


def fused(dense: Ranking, lexical: Ranking, depth: int, method: str, alpha) -> Ranking:
    return [
        [(h.row, h.score) for h in fuse(d, lx, depth, method, alpha=alpha if alpha is not None else 0.5)]
        for d, lx in zip(dense, lexical, strict=True)
    ]


def prf_rankings(
    queries: np.ndarray, docs: np.ndarray, dense: Ranking, lexical: Ranking, depth: int, alpha: float
) -> Ranking:
    """`prf` as `SearchIndex.search_text` runs it: `feedback_query` from the z-score top `PRF_DOCS`,
    exact dense search again; a query without lexical hits keeps its dense ranking."""
    first = fused(dense, lexical, PRF_DOCS, "zscore", alpha)
    moved = np.stack(
        [
            feedback_query(q, docs[[r for r, _ in hits]]) if lx else q
            for q, hits, lx in zip(queries, first, lexical, strict=True)
        ]
    )
    again = dense_rankings(moved, docs, depth)
    return [a if lx else d for a, d, lx in zip(again, dense, lexical, strict=True)]


def all_rankings(dense: Ranking, lexical: Ranking, depth: int, prf=None) -> dict[str, Ranking]:
    """Every ranking to compare; `prf(alpha) -> Ranking` is the feedback search (it needs vectors)."""
    rankings = {"dense": dense, "lexical (BM25)": lexical}
    for method, alpha in FUSIONS:
        label = "RRF (k=60)" if alpha is None else f"{method} alpha={alpha}"
        rankings[label] = fused(dense, lexical, depth, method, alpha)
    if prf is not None:
        for alpha in (0.5, 0.7, 0.8):
            rankings[f"prf alpha={alpha}" + (" (default)" if alpha == DEFAULT_ALPHA else "")] = prf(alpha)
        rankings["prf alpha=0.7, then zscore 0.7 with BM25"] = fused(prf(0.7), lexical, depth, "zscore", 0.7)
    return rankings


def beir(encoder, name: str, depth: int, cache: Path | None) -> list[dict]:
    data = read_beir(DATA / name, "test")
    doc_ids, texts = data.document_texts()
    qids, queries = list(data.queries), list(data.queries.values())
    doc_vectors = embed(encoder, texts, cache, f"{name}-docs")
    query_vectors = embed(encoder, queries, cache, f"{name}-queries")
    dense = dense_rankings(query_vectors, doc_vectors, depth)
    docs = [Doc(data.corpus[i]["title"], data.corpus[i]["text"]) for i in doc_ids]
    lexical = lexical_rankings(docs, queries, depth)
    rows = []
    prf = lambda alpha: prf_rankings(query_vectors, doc_vectors, dense, lexical, depth, alpha)  # noqa: E731
    for label, ranking in all_rankings(dense, lexical, depth, prf).items():
        judged = {q: hits for q, hits in zip(qids, ranking, strict=True) if q in data.qrels}
        run = {q: {doc_ids[r]: s for r, s in hits} for q, hits in judged.items()}
        metrics = evaluate_run(run, data.qrels, ("ndcg@10", "recall@100")).metrics
        rows.append({"ranking": label, **metrics})
    return rows


def sts_b(encoder, depth: int, cache: Path | None, exclude: str) -> list[dict]:
    task = sts_retrieval_task(DATA / "sts" / "stsb-test.tsv")
    vectors = embed(encoder, task.sentences, cache, "stsb-test-sentences")
    dense_rows = rank_rows(task, vectors, depth, exclude)
    scores = vectors[task.queries] @ vectors.T
    dense = [[(r, float(s[r])) for r in rows] for rows, s in zip(dense_rows, scores, strict=True)]
    queries = [task.sentences[q] for q in task.queries]
    found = lexical_rankings([Doc("", s) for s in task.sentences], queries, depth + 50)
    lexical = []
    for hits, query in zip(found, task.queries, strict=True):  # leave out what dense left out
        text = task.sentences[query]
        kept = [(r, s) for r, s in hits if r != query and (exclude == "row" or task.sentences[r] != text)]
        lexical.append(kept[:depth])
    rows = []
    prf = lambda alpha: prf_rankings(vectors[task.queries], vectors, dense, lexical, depth, alpha)  # noqa: E731
    for label, ranking in all_rankings(dense, lexical, depth, prf).items():
        metrics = recall_from_rankings(task, [[r for r, _ in hits] for hits in ranking], exclude=exclude)
        rows.append({"ranking": label, **metrics})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=100, help="candidates per side and query")
    parser.add_argument("--cache", type=Path, help="folder for the embeddings, reused when present")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import embedkit

    encoder = embedkit.load_encoder(None, device="cpu")
    result = {name: beir(encoder, name, args.depth, args.cache) for name in COLLECTIONS}
    for exclude in ("row", "text"):
        result[f"stsb_exclude_{exclude}"] = sts_b(encoder, args.depth, args.cache, exclude)
    print(f"default: {DEFAULT_FUSION} alpha={DEFAULT_ALPHA}; depth {args.depth}")
    for name in COLLECTIONS:
        print(f"{name} test: ranking, nDCG@10, Recall@100 (x100)")
        for row in result[name]:
            print(f"  {row['ranking']:32s} {100 * row['ndcg@10']:6.2f}  {100 * row['recall@100']:6.2f}")
    for exclude in ("row", "text"):
        print(f"STS-B test, DiffCSE protocol, exclude={exclude}: ranking, R@1, R@5, R@10 (x100)")
        for row in result[f"stsb_exclude_{exclude}"]:
            recalls = " ".join(f"{row[f'recall@{k}']:6.2f}" for k in (1, 5, 10))
            print(f"  {row['ranking']:32s} {recalls}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
