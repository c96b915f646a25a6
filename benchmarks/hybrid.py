"""Hybrid retrieval quality: dense, BM25 and fusion choices, with the bundled all-MiniLM-L6-v2.

Every ranking is the search pipeline's (`embedkit.search.pipeline`) over the collection held in
memory (`embedkit.evaluation.memory_store`), as `embedkit eval retrieval --mode M --fusion F
--alpha A` searches it: dense is exact cosine search (equal scores by doc id, descending), lexical
is `embedkit.index.lexical` (tantivy BM25), hybrid fuses both sides' `--depth` candidates with
`embedkit.search.fusion` or runs `prf`. Only the embeddings are the benchmark's: computed once,
kept in `--cache`, and handed to the pipeline (documents as the store's vectors, queries by
`StoredQueries`).

1. BEIR collections (test qrels), Cranfield (BM25-friendly) and msmarco-5k (the model is in-domain,
   BM25 far behind): documents embedded as title + " " + text (as the index build does), queries as
   their text. As BEIR's default and `eval retrieval`, a query does not retrieve the document whose
   id equals its own (`SearchRequest.exclude`). nDCG@10 and Recall@100 with
   `embedkit.evaluation.metrics`.
2. STS-B test, the DiffCSE retrieval protocol (`embedkit.evaluation.sts_retrieval`), leaving out the
   query's own row and, second, every row of the query's text: Recall@1/5/10 of the dense model,
   BM25 and the fusions on the same task, a third data set for the choice of a default fusion. Each
   sentence is a document whose id the query excludes: its row's, or, to leave out the query's
   text, the id of its text's first row, shared by every row of that text. Each side fetches
   one candidate more than `--depth` for the excluded id, so where a query's text has c copies its
   sides keep `--depth` + 1 - c candidates. Ids count down as rows count up (`sentence_ids`), so
   equal scores go to the lower row, as the protocol has it.

Fusions: RRF (k=60); z-score and min-max at dense weight alpha;
and dense pseudo-relevance feedback (`prf`, the default: Rocchio on the query vector from the top
z-score hits, then dense search again), with its first ranking at several dense weights. The last
row fuses the pipeline's prf ranking with its BM25 ranking again (`embedkit.search.fusion.fuse`):
a variant that `embedkit search` does not offer.

    python benchmarks/hybrid.py --cache /tmp/hybrid-cache --json hybrid.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.data.document import Document
from embedkit.encode.prefixes import Prefixes
from embedkit.evaluation.memory_store import MemoryStore
from embedkit.evaluation.metrics import evaluate_run
from embedkit.evaluation.sts_retrieval import recall_from_rankings, sts_retrieval_task
from embedkit.search import pipeline
from embedkit.search.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, fuse
from embedkit.search.request import SearchRequest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COLLECTIONS = ("cranfield", "msmarco-5k")
METRICS = ("ndcg@10", "recall@100")
K = 100  # hits a query: Recall@100 reads them all
ALPHAS = (0.3, 0.5, 0.6, 0.7, 0.8, 0.9)
FUSIONS = [
    ("rrf", None),
    *(("zscore", a) for a in ALPHAS),
    ("minmax", 0.5),
    ("minmax", 0.7),
]
PRF_ALPHAS = (0.5, 0.7, 0.8)
REFUSED = "prf alpha=0.7, then zscore 0.7 with BM25"

Ranking = list[list[tuple[int, float]]]  # each query's (row, score), best first


class StoredQueries:
    """The encoder the pipeline embeds the queries with: their vectors, embedded once (`embed`)."""

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        self.vectors = dict(zip(texts, vectors, strict=True))

    def encode(self, texts, batch_size: int = 64, normalize: bool | None = None, progress: bool = False):
        return np.stack([self.vectors[text] for text in texts])


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


def requests(depth: int) -> dict[str, SearchRequest]:
    """Every ranking to compare, by label: the search `eval retrieval --mode M --fusion F --alpha A` runs."""
    asked = {"dense": SearchRequest(K, mode="dense"), "lexical (BM25)": SearchRequest(K, mode="lexical")}
    for method, alpha in FUSIONS:
        label = "RRF (k=60)" if alpha is None else f"{method} alpha={alpha}"
        asked[label] = SearchRequest(K, mode="hybrid", fusion=method, alpha=alpha, depth=depth)
    for alpha in PRF_ALPHAS:
        asked[prf_label(alpha)] = SearchRequest(K, mode="hybrid", fusion="prf", alpha=alpha, depth=depth)
    return asked


def prf_label(alpha: float) -> str:
    return f"prf alpha={alpha}" + (" (default)" if alpha == DEFAULT_ALPHA else "")


def all_rankings(
    store: MemoryStore, texts: list[str], queries: StoredQueries, depth: int, exclude: list[str]
) -> dict[str, Ranking]:
    """Each ranking of `requests` by the search pipeline, each query leaving out its `exclude` id;
    then `REFUSED`, prf's ranking fused with BM25's again."""
    found = {}
    for label, request in requests(depth).items():
        resolved = replace(request, exclude=exclude).resolved({}, has_lexical=True)
        model = queries if resolved.mode != "lexical" else None
        hits = pipeline.search(store, texts, model, resolved, Prefixes())
        found[label] = [[(h.row, h.score) for h in line] for line in hits]
    prf = found[prf_label(0.7)]
    found[REFUSED] = [
        [(f.row, f.score) for f in fuse(p, x, K, "zscore", alpha=0.7)]
        for p, x in zip(prf, found["lexical (BM25)"], strict=True)
    ]
    return found


def beir(encoder, folder: Path, depth: int, cache: Path | None) -> list[dict]:
    """nDCG@10 and Recall@100 of every ranking on the judged test queries of a BEIR folder."""
    data = read_beir(folder, "test")
    documents = [Document(i, d["text"], d["title"]) for i, d in data.corpus.items()]
    _, texts = data.document_texts()
    store = MemoryStore(documents, embed(encoder, texts, cache, f"{folder.name}-docs"))
    every = list(data.queries.values())
    queries = StoredQueries(every, embed(encoder, every, cache, f"{folder.name}-queries"))
    judged = [q for q in data.queries if q in data.qrels]
    try:
        found = all_rankings(store, [data.queries[q] for q in judged], queries, depth, judged)
    finally:
        store.close()
    rows = []
    for label, ranking in found.items():
        run = {q: {store.ids[r]: s for r, s in hits} for q, hits in zip(judged, ranking, strict=True)}
        rows.append({"ranking": label, **evaluate_run(run, data.qrels, METRICS).metrics})
    return rows


def sentence_ids(sentences: list[str], exclude: str) -> list[str]:
    """Each row's id: its own, or to leave out a query's text, its text's first row's. Ids count
    down as rows count up, so the store's ties (by id, descending) go to the lower row, as the
    protocol orders them (`embedkit.evaluation.sts_retrieval`)."""
    first: dict[str, int] = {}
    rows = [first.setdefault(text, row) if exclude == "text" else row for row, text in enumerate(sentences)]
    width = len(str(len(sentences)))
    return [f"s{len(sentences) - 1 - row:0{width}d}" for row in rows]


def sts_b(encoder, path: Path, depth: int, cache: Path | None, exclude: str) -> list[dict]:
    """Recall@1/5/10 of every ranking on an STS file by the DiffCSE protocol, `exclude` row or text."""
    task = sts_retrieval_task(path)
    vectors = embed(encoder, task.sentences, cache, f"{path.stem}-sentences")
    ids = sentence_ids(task.sentences, exclude)
    store = MemoryStore([Document(i, s) for i, s in zip(ids, task.sentences, strict=True)], vectors)
    texts = [task.sentences[q] for q in task.queries]
    try:
        found = all_rankings(
            store, texts, StoredQueries(texts, vectors[task.queries]), depth, [ids[q] for q in task.queries]
        )
    finally:
        store.close()
    rows = []
    for label, ranking in found.items():
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
    result = {name: beir(encoder, DATA / name, args.depth, args.cache) for name in COLLECTIONS}
    stsb = DATA / "sts" / "stsb-test.tsv"
    for exclude in ("row", "text"):
        result[f"stsb_exclude_{exclude}"] = sts_b(encoder, stsb, args.depth, args.cache, exclude)
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
