"""The lexical side of hybrid search, `embedkit.index.lexical` (tantivy BM25): quality and speed.

Measures, in one run:
1. quality on Cranfield and msmarco-5k (nDCG@10, Recall@100 with `embedkit.evaluation.metrics`,
   `--depth` candidates): the default analysis and variants; with `--before REV`, also the engine
   embedkit had at that git revision (BM25 postings in SQLite), read from git into a temporary
   folder, so before and after run on the same machine in the same process;
2. at `--docs` synthetic documents (Cranfield sentences drawn at random, Cranfield's length
   distribution): build time and size, query latency p50/p99 over the 225 Cranfield queries one at
   a time (second of two rounds), and appending `--append` more documents (as `index --append`
   does: copy the folder, add, commit one segment), with the segment count before and after;
3. the dense side at the same scale: the bundled all-MiniLM-L6-v2 (ONNX, CPU) embedding 2,000 of
   the synthetic documents (the rate against which the lexical build is compared), encoding one
   query, and a FAISS IndexFlatIP search over `--docs` random 384-d unit vectors.

    python benchmarks/lexical.py --docs 100000 --before 3794fd1 --json lexical-100k.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embedkit.data.beir import read_beir
from embedkit.evaluation.metrics import evaluate_run
from embedkit.index.lexical import LexicalIndex, LexicalSettings, term_spans
from embedkit.search.snippets import snippets

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
METRICS = ("ndcg@10", "recall@100")


@dataclass(frozen=True)
class Doc:
    title: str
    text: str


def percentiles(seconds: list[float], prefix: str = "") -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {
        f"{prefix}p50_ms": round(float(np.percentile(ms, 50)), 3),
        f"{prefix}p99_ms": round(float(np.percentile(ms, 99)), 3),
    }


def latency(search, queries: list[str], rounds: int = 2) -> dict[str, float]:
    """Wall and CPU time p50/p99 of one query at a time; all rounds but the last warm caches."""
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


def timed(fn) -> dict[str, float]:
    start, start_cpu = time.perf_counter(), time.process_time()
    fn()
    return {
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(time.process_time() - start_cpu, 3),
    }


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


# --- the engines ---------------------------------------------------------------------------------


def tantivy_build(
    docs: list[Doc], folder: Path | None, settings: LexicalSettings | None = None
) -> LexicalIndex:
    index = LexicalIndex.create(folder, settings)
    index.add(0, docs)
    index.commit()
    return index


class SqliteEngine:
    """The SQLite postings engine of an earlier revision, loaded from git (never part of the package)."""

    def __init__(self, revision: str, scratch: Path) -> None:
        root = Path(__file__).resolve().parents[1]
        code = {}
        for name in ("lexical", "text_analysis"):
            show = ["git", "-C", str(root), "show", f"{revision}:embedkit/index/{name}.py"]
            code[name] = subprocess.run(show, check=True, capture_output=True, text=True).stdout
        code["lexical"] = code["lexical"].replace("embedkit.index.text_analysis", "old_text_analysis")
        for name, text in code.items():
            (scratch / f"old_{name}.py").write_text(text)
        sys.path.insert(0, str(scratch))
        self.module = importlib.import_module("old_lexical")

    def build(self, docs: list[Doc], path: str = ":memory:"):
        import sqlite3

        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        self.module.create_lexical(db)
        for start in range(0, len(docs), 10_000):
            self.module.add_documents(db, start, docs[start : start + 10_000])
        db.commit()
        return db

    def search(self, db, queries: list[str], k: int):
        return self.module.search_lexical(db, queries, k)


# --- 1. quality ----------------------------------------------------------------------------------


def quality(name: str, depth: int, before: SqliteEngine | None) -> list[dict]:
    data = read_beir(DATA / name, "test")
    doc_ids = list(data.corpus)
    docs = [Doc(data.corpus[i]["title"], data.corpus[i]["text"]) for i in doc_ids]
    qids, queries = list(data.queries), list(data.queries.values())

    def score(label: str, hits: list[list[tuple[int, float]]]) -> dict:
        run = {q: {doc_ids[r]: s for r, s in h} for q, h in zip(qids, hits, strict=True) if q in data.qrels}
        return {"collection": name, "engine": label, **evaluate_run(run, data.qrels, METRICS).metrics}

    rows = []
    for label, settings in [
        ("tantivy (default: Snowball English stemmer, Lucene stopwords)", LexicalSettings()),
        ("tantivy, no stopwords", LexicalSettings(stopwords="none")),
        ("tantivy, no stemmer", LexicalSettings(stemmer="none")),
    ]:
        rows.append(score(label, tantivy_build(docs, None, settings).search(queries, depth)))
    if before is not None:
        rows.append(score("before: SQLite postings", before.search(before.build(docs), queries, depth)))
    return rows


# --- 2. scale ------------------------------------------------------------------------------------


def synthetic(docs: list[Doc], n: int, seed: int = 0) -> list[Doc]:
    """`n` documents of random Cranfield sentences, as many as a random Cranfield document has."""
    rng = random.Random(seed)
    split = [[s for s in re.split(r"(?<=\.)\s+", d.text) if s] for d in docs]
    pool = [s for sentences in split for s in sentences]
    titles = [d.title for d in docs]
    counts = [max(1, len(s)) for s in split]
    return [Doc(rng.choice(titles), " ".join(rng.choices(pool, k=rng.choice(counts)))) for _ in range(n)]


class IndexAnalysis:
    """What snippets read from a store, from the lexical index alone (as `LocalStore` gives it)."""

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index

    def term_spans(self, text: str) -> list[tuple[str, int, int]]:
        return term_spans(text, self.index.settings)

    def term_idf(self, terms) -> dict[str, float]:
        return self.index.term_idf(terms)


def segments(folder: Path) -> int:
    return len(json.loads((folder / "meta.json").read_text())["segments"])


def scale(docs, queries, n: int, extra_n: int, depth: int, folder: Path, before: SqliteEngine | None) -> dict:
    corpus, extra = synthetic(docs, n), synthetic(docs, extra_n, seed=1)
    words = sum(len(d.title.split()) + len(d.text.split()) for d in corpus)
    out: dict = {"docs": n, "words_per_doc": round(words / n, 1)}
    holder: dict = {}
    out["build"] = timed(lambda: holder.setdefault("index", tantivy_build(corpus, folder / "v1")))
    index = holder["index"]
    out["bytes"] = folder_bytes(folder / "v1")
    out["segments"] = segments(folder / "v1")
    out["query_depth100"] = latency(lambda q: index.search([q], depth), queries)
    out["query_depth10"] = latency(lambda q: index.search([q], 10), queries)

    def append() -> None:  # what `embedkit index --append` does with the lexical side
        LexicalIndex.copy_folder(folder / "v1", folder / "v2")
        copy = LexicalIndex.open(folder / "v2", LexicalSettings())
        copy.add(n, extra)
        copy.commit()
        holder["appended"] = copy

    out[f"append_{extra_n}"] = timed(append)
    out["segments_after_append"] = segments(folder / "v2")
    out["query_depth100_after_append"] = latency(lambda q: holder["appended"].search([q], depth), queries)
    snippets_of = [d.text for d in corpus[:10]]
    analysis = IndexAnalysis(index)
    out["snippets_10_hits"] = latency(lambda q: snippets(q, snippets_of, analysis), queries)
    if before is not None:
        path = folder / "before.sqlite"
        db_holder: dict = {}
        out["before_build"] = timed(lambda: db_holder.setdefault("db", before.build(corpus, str(path))))
        out["before_bytes"] = path.stat().st_size
        out["before_query_depth100"] = latency(lambda q: before.search(db_holder["db"], [q], depth), queries)
    return out


# --- 3. dense ------------------------------------------------------------------------------------


def dense(docs: list[Doc], queries: list[str], n: int, depth: int) -> dict:
    import faiss

    import embedkit

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(384)
    index.add(vectors)
    encoder = embedkit.load_encoder(None, device="cpu")
    sample = [f"{d.title} {d.text}" for d in synthetic(docs, 2000, seed=2)]
    encoder.encode(sample[:64], batch_size=64)  # warm-up
    embed = timed(lambda: encoder.encode(sample, batch_size=64, normalize=True))
    query_vectors = {q: encoder.encode([q], normalize=True) for q in queries}
    return {
        "embed_2000_docs": embed,
        "embed_docs_per_s": round(2000 / embed["wall_s"], 1),
        "flat_search": latency(lambda q: index.search(query_vectors[q], depth), queries),
        "encode_one_query": latency(lambda q: encoder.encode([q], normalize=True), queries),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--append", type=int, default=10_000, help="documents appended to the --docs index")
    parser.add_argument("--depth", type=int, default=100, help="candidates per query")
    parser.add_argument("--before", help="git revision whose SQLite engine to measure beside tantivy")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        before = SqliteEngine(args.before, Path(scratch)) if args.before else None
        rows = [row for name in ("cranfield", "msmarco-5k") for row in quality(name, args.depth, before)]
        for row in rows:
            print(
                f"{row['collection']:11s} {row['engine']:62s} nDCG@10 {row['ndcg@10']:.4f}  "
                f"Recall@100 {row['recall@100']:.4f}"
            )
        data = read_beir(DATA / "cranfield", "test")
        docs = [Doc(d["title"], d["text"]) for d in data.corpus.values()]
        queries = list(data.queries.values())
        folder = Path(scratch) / "scale"
        folder.mkdir()
        at_scale = scale(docs, queries, args.docs, args.append, args.depth, folder, before)
    print(json.dumps(at_scale, indent=2))
    dense_side = dense(docs, queries, args.docs, args.depth)
    per_doc_embed = 1 / dense_side["embed_docs_per_s"]
    at_scale["build_share_of_embedding"] = round(at_scale["build"]["wall_s"] / (per_doc_embed * args.docs), 4)
    print(json.dumps(dense_side, indent=2))
    share = at_scale["build_share_of_embedding"]
    print(f"lexical build / embedding the same {args.docs} documents: {share:.2%}")
    if args.json:
        args.json.write_text(json.dumps({"quality": rows, "scale": at_scale, "dense": dense_side}, indent=2))


if __name__ == "__main__":
    main()
