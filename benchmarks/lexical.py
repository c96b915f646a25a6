"""BM25 engines for the lexical side of hybrid search: `embedkit.index.lexical`, SQLite FTS5 and bm25s.

Measures
1. quality on Cranfield (nDCG@10, Recall@100 with `embedkit.evaluation.metrics`, `--depth` candidates):
   embedkit.index.lexical with its default analysis and variants; FTS5 and bm25s fed the very same terms
   (so only the engines differ: FTS5's bm25() has k1=1.2, b=0.75 fixed and IDF
   ln((N-n+0.5)/(n+0.5)) floored at 1e-6; bm25s "lucene" is embedkit's formula) and bm25s with
   its own tokenizer and PyStemmer; and the largest score difference between embedkit and bm25s
   on the same terms (a check of both);
2. at `--docs` synthetic documents (Cranfield sentences drawn at random, Cranfield's length
   distribution): build time, size, query latency p50/p99 over the 225 Cranfield queries one at a
   time (second of two rounds), and the cost of appending 1,000 documents;
3. the dense side at the same scale: faiss IndexFlatIP over `--docs` random 384-d unit vectors, one
   query at a time, and the bundled all-MiniLM-L6-v2 (torch, CPU) encoding one query.

    python benchmarks/lexical.py --docs 100000 --json lexical-100k.json

The bm25s rows need `pip install bm25s PyStemmer` (skipped without them).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.evaluation.metrics import evaluate_run
from embedkit.index.lexical import (
    LexicalSettings,
    add_documents,
    analyze_many,
    create_lexical,
    optimize_lexical,
    search_lexical,
)

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
METRICS = ("ndcg@10", "recall@100")
CHUNK = 10_000  # documents per add_documents call, as an index build's embedding chunk


@dataclass(frozen=True)
class Doc:
    title: str
    text: str


def percentiles(seconds: list[float], prefix: str = "") -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        f"{prefix}p50_ms": round(float(np.percentile(ms, 50)), 2),
        f"{prefix}p99_ms": round(float(np.percentile(ms, 99)), 2),
    }


def connect(path: str = ":memory:") -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")  # as the document store builds
    db.execute("PRAGMA synchronous=OFF")
    return db


def latency(search, queries: list[str], rounds: int = 2) -> dict[str, float]:
    """Wall and CPU time p50/p99 of one query at a time; all rounds but the last warm caches.

    CPU time is this process's, so it is the figure to trust on a shared, loaded machine.
    """
    wall, cpu = [], []
    for _ in range(rounds):
        wall.clear()
        cpu.clear()
        for query in queries:
            start, start_cpu = time.perf_counter(), time.process_time()
            search(query)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
    return {**percentiles(wall), **percentiles(cpu, "cpu_")}


# --- the engines ---------------------------------------------------------------------------------


def embedkit_build(
    db: sqlite3.Connection, docs: list[Doc], settings: LexicalSettings, first: int = 0
) -> None:
    if first == 0:
        create_lexical(db, settings)
    for start in range(0, len(docs), CHUNK):
        add_documents(db, first + start, docs[start : start + CHUNK])
    db.commit()


def fts5_build(db: sqlite3.Connection, docs: list[Doc], first: int = 0) -> None:
    """FTS5 over embedkit's analysed terms (no FTS5 stemmer: the terms are stemmed already)."""
    if first == 0:
        db.execute(
            "CREATE VIRTUAL TABLE fts USING fts5(body, content='', "
            "tokenize=\"unicode61 remove_diacritics 0 categories 'L* N* M*'\")"
        )
    for start in range(0, len(docs), CHUNK):
        part = docs[start : start + CHUNK]
        terms = analyze_many([f"{d.title} {d.text}" for d in part])
        db.executemany(
            "INSERT INTO fts (rowid, body) VALUES (?, ?)",
            enumerate((" ".join(t) for t in terms), first + start),
        )
    db.commit()


def fts5_search(db: sqlite3.Connection, query: str, k: int) -> list[tuple[int, float]]:
    terms = dict.fromkeys(analyze_many([query])[0])
    if not terms:
        return []
    expression = " OR ".join(f'"{t}"' for t in terms)
    sql = "SELECT rowid, -rank FROM fts WHERE fts MATCH ? ORDER BY rank, rowid LIMIT ?"
    return [(int(r), float(s)) for r, s in db.execute(sql, (expression, k))]


def bm25s_index(term_lists: list[list[str]]):
    import bm25s

    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(term_lists, show_progress=False)
    return retriever


def bm25s_search(retriever, terms: list[str], k: int) -> list[tuple[int, float]]:
    known = list(dict.fromkeys(t for t in terms if t in retriever.vocab_dict))
    if not known:
        return []
    k = min(k, retriever.scores["num_docs"])
    docs, scores = retriever.retrieve([known], k=k, show_progress=False, n_threads=1)
    return [(int(d), float(s)) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


def have_bm25s() -> bool:
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError:
        return False
    return True


# --- 1. quality ----------------------------------------------------------------------------------


def quality(depth: int) -> tuple[list[dict], dict, list[Doc], list[str]]:
    data = read_beir(CRANFIELD, "test")
    doc_ids = list(data.corpus)
    docs = [Doc(data.corpus[i]["title"], data.corpus[i]["text"]) for i in doc_ids]
    qids, queries = list(data.queries), list(data.queries.values())

    def score(label: str, hits: list[list[tuple[int, float]]]) -> dict:
        run = {q: {doc_ids[r]: s for r, s in h} for q, h in zip(qids, hits, strict=True)}
        return {"engine": label, **evaluate_run(run, data.qrels, METRICS).metrics}

    rows = []
    for label, settings in [
        ("embedkit.index.lexical (default: Snowball English stemmer, Lucene stopwords)", LexicalSettings()),
        ("embedkit.index.lexical, Porter (1980) stemmer", LexicalSettings(stemmer="porter")),
        ("embedkit.index.lexical, no stopwords", LexicalSettings(stopwords="none")),
        ("embedkit.index.lexical, no stemmer", LexicalSettings(stemmer="none")),
    ]:
        db = connect()
        embedkit_build(db, docs, settings)
        hits = search_lexical(db, queries, depth)
        rows.append(score(label, hits))
        if settings == LexicalSettings():
            ours = hits
    db = connect()
    fts5_build(db, docs)
    rows.append(score("SQLite FTS5 bm25(), same terms", [fts5_search(db, q, depth) for q in queries]))
    check: dict = {}
    if have_bm25s():
        import bm25s
        import Stemmer

        retriever = bm25s_index(analyze_many([f"{d.title} {d.text}" for d in docs]))
        theirs = [bm25s_search(retriever, terms, depth) for terms in analyze_many(queries)]
        rows.append(score("bm25s lucene, same terms", theirs))
        # bm25s drops BM25's constant (k1 + 1) factor and computes in float32.
        diffs = [
            abs(s / 2.2 - dict(t).get(r, np.nan)) / (s / 2.2)
            for o, t in zip(ours, theirs, strict=True)
            for r, s in o
        ]
        check = {
            "max_relative_score_difference_vs_bm25s": float(np.nanmax(diffs)),
            "missing": int(np.isnan(diffs).sum()),
        }
        stemmer = Stemmer.Stemmer("english")
        texts = [f"{d.title} {d.text}" for d in docs]
        own = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
        own.index(bm25s.tokenize(texts, stemmer=stemmer, show_progress=False), show_progress=False)
        tokens = bm25s.tokenize(queries, stemmer=stemmer, return_ids=False, show_progress=False)
        rows.append(
            score("bm25s lucene, own tokenizer + PyStemmer", [bm25s_search(own, t, depth) for t in tokens])
        )
    return rows, check, docs, queries


# --- 2. scale ------------------------------------------------------------------------------------


def synthetic(docs: list[Doc], n: int, seed: int = 0) -> list[Doc]:
    """`n` documents of random Cranfield sentences, as many as a random Cranfield document has."""
    rng = random.Random(seed)
    split = [[s for s in re.split(r"(?<=\.)\s+", d.text) if s] for d in docs]
    pool = [s for sentences in split for s in sentences]
    titles = [d.title for d in docs]
    counts = [max(1, len(s)) for s in split]
    return [Doc(rng.choice(titles), " ".join(rng.choices(pool, k=rng.choice(counts)))) for _ in range(n)]


def timed(fn) -> dict[str, float]:
    """Wall and CPU seconds of `fn()`."""
    start, start_cpu = time.perf_counter(), time.process_time()
    fn()
    return {
        "wall_s": round(time.perf_counter() - start, 2),
        "cpu_s": round(time.process_time() - start_cpu, 2),
    }


def scale(docs: list[Doc], queries: list[str], n: int, depth: int, folder: Path) -> dict:
    corpus, extra = synthetic(docs, n), synthetic(docs, 1000, seed=1)
    words = sum(len(d.title.split()) + len(d.text.split()) for d in corpus)
    out: dict = {"docs": n, "words_per_doc": round(words / n, 1)}

    path = folder / "embedkit.sqlite"
    db = connect(str(path))
    out["embedkit_build"] = timed(lambda: embedkit_build(db, corpus, LexicalSettings()))
    out["embedkit_bytes"] = path.stat().st_size
    out["embedkit_query"] = latency(lambda q: search_lexical(db, [q], depth), queries)
    out["embedkit_query_depth10"] = latency(lambda q: search_lexical(db, [q], 10), queries)
    batch = timed(lambda: search_lexical(db, queries, depth))
    out["embedkit_batch_cpu_ms_per_query"] = round(batch["cpu_s"] * 1000 / len(queries), 2)
    out["embedkit_append_1000"] = timed(lambda: embedkit_build(db, extra, LexicalSettings(), first=n))
    out["embedkit_query_after_append"] = latency(lambda q: search_lexical(db, [q], depth), queries)
    out["embedkit_optimize"] = timed(lambda: (optimize_lexical(db), db.commit()))
    db.close()

    path = folder / "fts5.sqlite"
    db = connect(str(path))
    out["fts5_build"] = timed(lambda: fts5_build(db, corpus))
    out["fts5_bytes"] = path.stat().st_size
    # FTS5 takes most of a second per query at 100k: fewer queries, one round after a warm-up.
    for query in queries[:3]:
        fts5_search(db, query, depth)
    out["fts5_query_first_50"] = latency(lambda q: fts5_search(db, q, depth), queries[:50], rounds=1)
    out["fts5_append_1000"] = timed(lambda: fts5_build(db, extra, first=n))
    db.close()

    if have_bm25s():
        texts = [f"{d.title} {d.text}" for d in corpus]
        holder: dict = {}
        out["bm25s_build"] = timed(lambda: holder.setdefault("r", bm25s_index(analyze_many(texts))))
        retriever = holder["r"]
        retriever.save(folder / "bm25s")
        out["bm25s_bytes"] = sum(p.stat().st_size for p in (folder / "bm25s").iterdir())
        out["bm25s_query"] = latency(lambda q: bm25s_search(retriever, analyze_many([q])[0], depth), queries)
        # bm25s bakes IDF into its matrix: adding documents means indexing everything again, so
        # its append costs a build (not timed again here).
    return out


# --- 3. dense ------------------------------------------------------------------------------------


def dense(queries: list[str], n: int, depth: int) -> dict:
    """One thread each (faiss, torch), so that CPU time is the cost of one query."""
    import faiss
    import torch

    import embedkit

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(384)
    index.add(vectors)
    encoder = embedkit.load_encoder(None, device="cpu")
    query_vectors = {q: encoder.encode([q], normalize=True) for q in queries}
    return {
        "threads": 1,
        "flat_search": latency(lambda q: index.search(query_vectors[q], depth), queries),
        "encode_one_query": latency(lambda q: encoder.encode([q], normalize=True), queries),
        "encode_plus_search": latency(
            lambda q: index.search(encoder.encode([q], normalize=True), depth), queries
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=100, help="candidates per query")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows, check, docs, queries = quality(args.depth)
    print(f"Cranfield, {len(queries)} queries, depth {args.depth}")
    for row in rows:
        print(f"  {row['engine']:75s} nDCG@10 {row['ndcg@10']:.4f}  Recall@100 {row['recall@100']:.4f}")
    print(json.dumps(check))
    with tempfile.TemporaryDirectory() as folder:
        at_scale = scale(docs, queries, args.docs, args.depth, Path(folder))
    print(json.dumps(at_scale, indent=2))
    dense_side = dense(queries, args.docs, args.depth)
    print(json.dumps(dense_side, indent=2))
    if args.json:
        result = {"quality": rows, "check": check, "scale": at_scale, "dense": dense_side}
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
