"""Fusion calibration on pseudo queries against judged queries: does the index's own choice pick well?

For Cranfield and msmarco-5k (../shared/data, judged test queries) and the bundled all-MiniLM-L6-v2:
each candidate of `embedkit.evaluation.fusion_rule.CANDIDATES` (and BM25 alone) scored (nDCG@10 x 100)
1. on the judged queries, over the whole collection, exact dense search and tantivy BM25, as
   `eval retrieval --mode hybrid --fusion F --alpha A` does;
2. on the index's label-free pseudo queries (`embedkit.evaluation.fusion_calibration.pseudo_task`),
   as `embedkit calibrate` scores them: the kind the rule reads; with `--every-kind` ict, title,
   terms and window, plus `ict-common`, the ict sentences without their rare words, a guard
   against the lexical bias of a sentence cut from its own document;
and the rule's choice (`embedkit.evaluation.fusion_rule.choose`) with its judged nDCG@10. docs/hybrid.md holds
the tables. A collection is a name under ../shared/data or a BEIR folder (a shortened one from
`benchmarks/short_collections.py`); with `--indexes DIR`, the documents and vectors are read back
from the index DIR/<collection name> (`embedkit index` of that collection) instead of embedded.

    python benchmarks/calibration.py --cache /tmp/calibration-cache --seeds 0 1 --json calibration.json
    python benchmarks/calibration.py --indexes /tmp/idx --collections cranfield /tmp/short/cranfield-short
    python benchmarks/calibration.py --cache /tmp/calibration-cache --cost   # seconds per 10k documents
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.data.corpus import Document
from embedkit.encode.prefixes import Prefixes
from embedkit.evaluation.fusion_calibration import CalibrationConfig, pseudo_task, too_few
from embedkit.evaluation.fusion_candidates import candidate_runs, per_query_ndcg, score_task
from embedkit.evaluation.fusion_rule import choose, score_table
from embedkit.evaluation.memory_store import MemoryStore

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
COLLECTIONS = ("cranfield", "msmarco-5k")


def embed(encoder, texts: list[str], cache: Path | None, name: str) -> np.ndarray:
    path = cache / f"{name}.npy" if cache else None
    if path is not None and path.is_file():
        return np.load(path)
    vectors = encoder.encode(texts, batch_size=64, normalize=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


def collection_dir(name: str) -> Path:
    return Path(name) if "/" in name else DATA / name


def from_index(folder: Path) -> tuple[list[Document], np.ndarray]:
    """An index's documents and stored vectors, in row order."""
    from embedkit import SearchIndex

    with SearchIndex.load(folder) as index:
        store = index.store
        rows = store.docs.rows_between(0, store.docs.next_row())
        held = store.held_at(rows)
        return [held[r] for r in rows], store.vectors_of_rows(rows)


def judged(encoder, folder: Path, documents: list[Document], doc_vectors: np.ndarray):
    """candidate -> nDCG@10 x 100 on the judged test queries, each leaving out the document whose
    id is its own (BEIR's identical ids), as `eval retrieval` searches."""
    data = read_beir(folder, "test")
    query_ids = [q for q in data.queries if q in data.qrels]
    texts = [data.queries[q] for q in query_ids]
    store = MemoryStore(documents, doc_vectors)  # searched by the pipeline, as the calibration does
    runs = candidate_runs(store, texts, encoder, Prefixes(), exclude=query_ids)
    ids = {f"q{i}": q for i, q in enumerate(query_ids)}
    scores = per_query_ndcg(
        {c: {ids[q]: hits for q, hits in run.items()} for c, run in runs.items()}, data.qrels
    )
    return {c: round(100 * float(np.mean(list(v.values()))), 2) for c, v in scores.items()}


def cost(encoder, cache: Path | None) -> None:
    """Seconds of `calibrate` (library defaults) on msmarco-5k's 5,000 passages and on them twice."""
    from embedkit.evaluation.fusion_calibration import calibrate

    data = read_beir(DATA / "msmarco-5k", "test")
    documents = [Document(i, d["text"], d["title"]) for i, d in data.corpus.items()]
    vectors = embed(encoder, [d.full_text for d in documents], cache, "msmarco-5k-docs")
    twice = documents + [Document(f"{d.id}-copy", d.text, d.title) for d in documents]
    for docs, vecs in ((documents, vectors), (twice, np.concatenate([vectors, vectors]))):
        start = time.perf_counter()
        chosen = calibrate(MemoryStore(docs, vecs), range(len(docs)), encoder)
        print(f"calibrate on {len(docs):,} documents: {time.perf_counter() - start:.1f} s, {chosen.queries}")


def score_seed(name: str, documents, doc_vectors, encoder, args: argparse.Namespace, seed: int) -> dict:
    """The pseudo-query table, intervals, scores, seconds and the rule's choice of one seed."""
    start = time.perf_counter()
    config = CalibrationConfig(
        queries=args.queries, seed=seed, common=args.every_kind, every_kind=args.every_kind
    )
    task = pseudo_task(documents, config)
    few = len(task.queries) < config.min_queries  # `calibrate` keeps the default, as here
    scores = {} if few else score_task(task, doc_vectors, encoder)
    seconds = time.perf_counter() - start
    table, intervals = score_table(scores, seed)
    if few:
        method, alpha, reason = too_few(len(task.queries), config)
        choice = {"method": method, "alpha": alpha, "reason": reason}
    else:
        choice = choose(scores, seed)._asdict()
    print(f"{name} seed {seed}: {len(task.queries)} pseudo queries in {seconds:.1f} s", flush=True)
    return {
        "table": table,
        "intervals": intervals,
        "scores": scores,
        "seconds": round(seconds, 1),
        "choice": choice,
    }


def print_collection(name: str, real: dict, pseudo: dict, first_seed: int) -> None:
    """Each candidate's judged and pseudo nDCG@10 (the first seed's), then each seed's choice."""
    first = pseudo[first_seed]["table"]
    kinds = list(first.get("dense", {}))
    print(f"{name}: candidate, judged nDCG@10, pseudo nDCG@10 by kind (seed {first_seed}) x100")
    print(f"  {'candidate':12s} {'judged':>7s} " + " ".join(f"{k:>8s}" for k in kinds))
    for candidate, value in real.items():
        pseudo_scores = " ".join(f"{first[candidate][k]:8.2f}" for k in kinds)
        print(f"  {candidate:12s} {value:7.2f} " + pseudo_scores)
    for seed, entry in pseudo.items():
        choice = entry["choice"]
        picked = (
            choice["method"]
            if choice["method"] in ("dense", "rrf")
            else f"{choice['method']} {choice['alpha']:g}"
        )
        print(
            f"  seed {seed}: rule picks {picked} -> judged {real.get(picked, float('nan')):.2f}",
            f"({choice['reason']})",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cache", type=Path, help="folder for the collections' embeddings, reused when present"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--queries", type=int, default=CalibrationConfig.queries, help="pseudo queries per kind"
    )
    parser.add_argument(
        "--every-kind",
        action="store_true",
        help="score every pseudo-query kind and ict-common (default: the kind the rule reads, as calibrate)",
    )
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--indexes", type=Path, help="read each collection's vectors from DIR/<name>")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--cost", action="store_true", help="only time `calibrate` on 5,000 and 10,000 passages"
    )
    args = parser.parse_args()
    import embedkit

    encoder = embedkit.load_encoder(None, device="cpu")
    if args.cost:
        cost(encoder, args.cache)
        return
    result = {}
    for collection in args.collections:
        folder = collection_dir(collection)
        name = folder.name
        if args.indexes:
            documents, doc_vectors = from_index(args.indexes / name)
        else:
            data = read_beir(folder, "test")
            documents = [Document(i, d["text"], d["title"]) for i, d in data.corpus.items()]
            doc_vectors = embed(encoder, [d.full_text for d in documents], args.cache, f"{name}-docs")
        real = judged(encoder, folder, documents, doc_vectors)
        pseudo = {seed: score_seed(name, documents, doc_vectors, encoder, args, seed) for seed in args.seeds}
        result[name] = {"judged": real, "pseudo": pseudo, "documents": len(documents)}
        print_collection(name, real, pseudo, args.seeds[0])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
