"""Milvus beside the local index: push throughput and per-query search latency (Milvus Lite).

    python benchmarks/milvus.py --docs 100000 --json milvus.json

Documents: synthetic ones of random Cranfield sentences (`benchmarks/lexical.py`'s generator), so
BM25 sees real vocabulary at any size. Vectors: random unit 384-d vectors, one per text (seeded by
the text), standing in for the bundled model's: embedding 100k abstract-length documents takes most
of an hour on 2 cores, and neither flat search's cost nor the push's depends on what the vectors
hold. The index is built locally (flat, with its tantivy side), then pushed to a Milvus Lite file
(`embedkit.remote.push.push_index`: FLAT dense index, BM25 function), timed end to end: reading the
vectors back from FAISS and the documents from SQLite, the upserts, the server-side BM25 analysis.

Latency: the first `--queries` Cranfield queries (default 100 of 225) one at a time, k = 10, the
query vector given (encoding a query costs the same on both sides; `benchmarks/hybrid_latency.py`
times it): dense (FAISS flat against Milvus FLAT search), lexical (tantivy against Milvus's BM25),
hybrid z-score through `search_text` (both sides at depth 100, the documents read back). Calls take
turns on each query; two rounds, the second timed. Milvus Lite is an embedded pure-Python engine
serving over gRPC on this machine: its figures measure Lite, not a Milvus cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
from hybrid_latency import (  # benchmarks/hybrid_latency.py
    CRANFIELD,
    SentenceMeanEncoder,
    interleaved,
    write_corpus,
)
from lexical import Doc, synthetic  # benchmarks/lexical.py

from embedkit import build_index, load_encoder
from embedkit.data.beir import read_beir
from embedkit.index.search import SearchIndex
from embedkit.jobs.index_options import IndexOptions
from embedkit.remote.base import RemoteTarget
from embedkit.remote.push import push_index
from embedkit.remote.search import open_pushed


class RandomEncoder(SentenceMeanEncoder):
    """A random unit vector per text (seeded by the text); the real model's identity otherwise."""

    def __init__(self, real) -> None:
        super().__init__(real, {})

    def encode_texts(self, texts: list[str], batch_size: int, normalize, progress: bool) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            out[i] = np.random.default_rng(zlib.crc32(text.encode("utf-8"))).standard_normal(self.dim)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def run(n: int, docs, queries: list[str], real, folder: Path) -> dict:
    corpus = folder / f"corpus-{n}.jsonl"
    write_corpus(synthetic(docs, n), corpus)
    encoder = RandomEncoder(real)
    out: dict = {"docs": n, "dim": encoder.dim}
    start = time.perf_counter()
    build_index(corpus, folder / f"index-{n}", encoder, IndexOptions(kind="flat"))
    out["local_build_s"] = round(time.perf_counter() - start, 1)
    target = RemoteTarget.parse(str(folder / f"milvus-{n}.db"), "bench")
    report = push_index(folder / f"index-{n}", target, progress=sys.stderr.isatty())
    out["push_s"] = round(report.seconds, 1)
    out["push_docs_per_s"] = round(report.sent / report.seconds)
    vectors = {q: v for q, v in zip(queries, encoder.encode(queries, normalize=True), strict=True)}
    with SearchIndex.load(folder / f"index-{n}") as local, open_pushed(target) as remote:
        calls = {}
        for side, index in (("local", local), ("milvus", remote)):
            calls[f"{side}_dense"] = lambda q, index=index: index.search(vectors[q], 10)
            calls[f"{side}_lexical"] = lambda q, index=index: index.store.search_lexical([q], 10, None)
            calls[f"{side}_hybrid_zscore"] = lambda q, index=index: index.search_text(
                [q], k=10, encoder=encoder, mode="hybrid", fusion="zscore"
            )
        out["latency"] = interleaved(calls, queries)
    out["db_bytes"] = sum(
        p.stat().st_size for p in folder.rglob("*") if f"milvus-{n}.db" in str(p) and p.is_file()
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[100_000])
    parser.add_argument("--queries", type=int, default=100, help="the first N Cranfield queries (of 225)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    beir = read_beir(CRANFIELD)
    docs = [Doc(d["title"], d["text"]) for d in beir.corpus.values()]
    queries = list(beir.queries.values())[: args.queries]
    real = load_encoder(None, device="cpu")
    import milvus_lite
    import pymilvus

    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "versions": {"pymilvus": pymilvus.__version__, "milvus-lite": milvus_lite.__version__},
        "load_average": os.getloadavg(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.docs:
            results["runs"].append(run(n, docs, queries, real, Path(tmp)))
            print(json.dumps(results["runs"][-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
