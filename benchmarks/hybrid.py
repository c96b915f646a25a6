"""Hybrid retrieval quality: dense, BM25 and their fusions, with the bundled all-MiniLM-L6-v2.

1. Cranfield (BEIR layout, test qrels): documents embedded as title + " " + text (as
   `BeirData.document_texts` and the index build do), queries as their text; dense = exact cosine
   search; lexical = `embedkit.index.lexical` BM25; both sides `--depth` candidates; fused with
   `embedkit.index.fusion` (RRF k=60; z-score and min-max at alpha = dense weight 0.3/0.5/0.7).
   nDCG@10 and Recall@100 with `embedkit.evaluation.metrics`.
2. STS-B test, the DiffCSE retrieval protocol (`embedkit.evaluation.sts_retrieval`), leaving out the query's
   own row and, second, every row of the query's text: Recall@1/5/10 of the dense model (the
   published comparison), and of BM25 and the fusions on the same task, a second data set for the
   choice of a default fusion.

    python benchmarks/hybrid.py --cache /tmp/hybrid-cache
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.evaluation.metrics import evaluate_run
from embedkit.evaluation.sts_retrieval import rank_rows, recall_from_rankings, sts_retrieval_task
from embedkit.index.fusion import fuse
from embedkit.index.lexical import add_documents, create_lexical, search_lexical

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FUSIONS = [("rrf", None), *((norm, a) for norm in ("zscore", "minmax") for a in (0.3, 0.5, 0.7))]


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


def dense_rankings(queries: np.ndarray, docs: np.ndarray, depth: int) -> list[list[tuple[int, float]]]:
    """Exact cosine top `depth`, ties by row ascending."""
    scores = queries @ docs.T
    rows = np.arange(docs.shape[0])
    out = []
    for row_scores in scores:
        order = np.lexsort((rows, -row_scores))[:depth]
        out.append([(int(r), float(row_scores[r])) for r in order])
    return out


def lexical_rankings(docs: list[Doc], queries: list[str], depth: int) -> list[list[tuple[int, float]]]:
    db = sqlite3.connect(":memory:")
    create_lexical(db)
    add_documents(db, 0, docs)
    return search_lexical(db, queries, depth)


def all_rankings(dense, lexical, depth: int) -> dict[str, list[list[tuple[int, float]]]]:
    rankings = {"dense": dense, "lexical (BM25)": lexical}
    for method, alpha in FUSIONS:
        label = "RRF (k=60)" if alpha is None else f"{method} alpha={alpha}"
        rankings[label] = [
            [(h.row, h.score) for h in fuse(d, lx, depth, method, alpha=alpha or 0.5)]
            for d, lx in zip(dense, lexical, strict=True)
        ]
    return rankings


def cranfield(encoder, depth: int, cache: Path | None) -> list[dict]:
    data = read_beir(DATA / "cranfield", "test")
    doc_ids, texts = data.document_texts()
    qids, queries = list(data.queries), list(data.queries.values())
    doc_vectors = embed(encoder, texts, cache, "cranfield-docs")
    query_vectors = embed(encoder, queries, cache, "cranfield-queries")
    dense = dense_rankings(query_vectors, doc_vectors, depth)
    docs = [Doc(data.corpus[i]["title"], data.corpus[i]["text"]) for i in doc_ids]
    lexical = lexical_rankings(docs, queries, depth)
    rows = []
    for label, ranking in all_rankings(dense, lexical, depth).items():
        run = {q: {doc_ids[r]: s for r, s in hits} for q, hits in zip(qids, ranking, strict=True)}
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
    for label, ranking in all_rankings(dense, lexical, depth).items():
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
    result = {"cranfield": cranfield(encoder, args.depth, args.cache)}
    for exclude in ("row", "text"):
        result[f"stsb_exclude_{exclude}"] = sts_b(encoder, args.depth, args.cache, exclude)
    print(f"Cranfield test, depth {args.depth}: ranking, nDCG@10, Recall@100")
    for row in result["cranfield"]:
        print(f"  {row['ranking']:20s} {row['ndcg@10']:.4f}  {row['recall@100']:.4f}")
    for exclude in ("row", "text"):
        print(f"STS-B test, DiffCSE protocol, exclude={exclude}: ranking, R@1, R@5, R@10 (x100)")
        for row in result[f"stsb_exclude_{exclude}"]:
            recalls = " ".join(f"{row[f'recall@{k}']:6.2f}" for k in (1, 5, 10))
            print(f"  {row['ranking']:20s} {recalls}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
