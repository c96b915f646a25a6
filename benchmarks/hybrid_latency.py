"""End-to-end search latency per mode, through `SearchIndex.search_text`, and index build time.

An index folder is built with `embedkit.build_index` at each `--docs` size, from
synthetic documents (random Cranfield sentences, as many as a random Cranfield document has: the
generator of `benchmarks/lexical.py`), once with the lexical side and once without. Then the 225
Cranfield queries run one at a time (what `embedkit search QUERY` does per process) in each mode:
dense (encode the query with the bundled ONNX model, FAISS), lexical (tantivy BM25), hybrid with
the default fusion (prf: both sides at depth 100, z-score fusion of the top 3, the feedback
vectors read back from FAISS, a second FAISS search) and hybrid with plain z-score fusion, k = 10,
documents read from the store. The modes take turns on each query, so a load that drifts during
the run weighs on all of them alike; two rounds, the second timed. Query encoding alone is timed
too, as it dominates the dense side.

Document vectors: at sizes up to `--embed-max` the real model embeds every document (the build
time is then the real one). Above it, embedding 100k abstract-length documents would take most of an
hour on 2 cores, so each document's vector is the normalised mean of its sentences' vectors (every
distinct sentence embedded once by the real model): real-model geometry for FAISS, and a build
time that excludes embedding (reported separately as a rate at the smaller size). Queries always
go through the real model.

    python benchmarks/hybrid_latency.py --docs 1000 100000 --json hybrid-latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
from lexical import Doc, synthetic  # benchmarks/lexical.py: the same synthetic documents

from embedkit import build_index, load_encoder
from embedkit.data.beir import read_beir
from embedkit.encode.protocol import EncoderBase
from embedkit.index.search import SearchIndex
from embedkit.jobs.index_options import IndexOptions

CRANFIELD = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
MODES = {  # label -> search_text arguments
    "dense": {"mode": "dense"},
    "lexical": {"mode": "lexical"},
    "hybrid": {"mode": "hybrid"},  # the default fusion, prf
    "hybrid_zscore": {"mode": "hybrid", "fusion": "zscore"},
}


class SentenceMeanEncoder(EncoderBase):
    """Documents: the mean of their sentences' precomputed vectors; anything else: the real model.

    It reports the real model's identity, so the index it builds accepts the real model's queries.
    """

    def __init__(self, real, sentence_vectors: dict[str, np.ndarray]) -> None:
        self.real = real
        self.table = sentence_vectors
        self.backend, self.path, self.dim = real.backend, real.path, real.dim
        self.max_seq_length = real.max_seq_length

    @property
    def device(self):
        return self.real.device

    @property
    def fingerprint(self) -> str:
        return self.real.fingerprint

    @property
    def truncated(self) -> int:
        return self.real.truncated

    def encode_texts(self, texts: list[str], batch_size: int, normalize, progress: bool) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            parts = [self.table[s] for s in split_sentences(text) if s in self.table]
            if not parts:
                out[i] = self.real.encode(text, normalize=True)
                continue
            mean = np.mean(parts, axis=0)
            out[i] = mean / np.linalg.norm(mean)
        return out


def split_sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", text) if s]


def write_corpus(docs: list[Doc], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"_id": f"d{i}", "title": d.title, "text": d.text}) + "\n")


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), 2) for q in (50, 99)}


def interleaved(calls: dict, queries: list[str], rounds: int = 2) -> dict[str, dict[str, float]]:
    """p50/p99 of each call per query, the calls taking turns on every query (so a load that drifts
    during the run weighs on all of them alike); the last of `rounds` rounds is timed."""
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        times = {label: [] for label in calls}
        for q in queries:
            for label, fn in calls.items():
                start = time.perf_counter()
                fn(q)
                times[label].append(time.perf_counter() - start)
    return {label: percentiles(seconds) for label, seconds in times.items()}


def run_size(n: int, docs: list[Doc], queries: list[str], real, embed_max: int, folder: Path) -> dict:
    corpus = synthetic(docs, n)
    path = folder / f"corpus-{n}.jsonl"
    write_corpus(corpus, path)
    out: dict = {"docs": n, "words_per_doc": round(sum(len(d.text.split()) for d in corpus) / n, 1)}
    if n <= embed_max:
        encoder, out["vectors"] = real, "embedded by the model"
    else:
        sentences = sorted({s for d in corpus for s in split_sentences(d.text)})
        start = time.perf_counter()
        vectors = real.encode(sentences, batch_size=64, normalize=True)
        out["sentence_embedding_s"] = round(time.perf_counter() - start, 1)
        out["vectors"] = f"mean of {len(sentences):,} embedded sentences"
        encoder = SentenceMeanEncoder(real, dict(zip(sentences, vectors, strict=True)))
    for lexical in (False, True):
        target = folder / f"index-{n}-{'hybrid' if lexical else 'dense'}"
        start = time.perf_counter()
        report = build_index(path, target, encoder, IndexOptions(lexical=lexical))
        out[f"build_s_{'with' if lexical else 'without'}_lexical"] = round(time.perf_counter() - start, 2)
        out["kind"] = report.kind
    with SearchIndex.load(folder / f"index-{n}-hybrid") as index:
        calls = {"encode_query": lambda q: real.encode(q, normalize=True)}
        calls.update(
            {
                label: (lambda q, how=how: index.search_text(q, 10, real, **how))
                for label, how in MODES.items()
            }
        )
        out.update(interleaved(calls, queries))
    out["hybrid_over_dense_p50"] = round(out["hybrid"]["p50_ms"] / out["dense"]["p50_ms"], 2)
    out["hybrid_over_dense_p99"] = round(out["hybrid"]["p99_ms"] / out["dense"]["p99_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--embed-max", type=int, default=5000, help="embed documents up to this size")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    data = read_beir(CRANFIELD)
    docs = [Doc(d["title"], d["text"]) for d in data.corpus.values()]
    queries = list(data.queries.values())
    real = load_encoder(None, device="cpu")
    results = {"load_average": os.getloadavg(), "model": str(real.path), "backend": real.backend, "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.docs:
            result = run_size(n, docs, queries, real, args.embed_max, Path(tmp))
            print(json.dumps(result))
            results["sizes"].append(result)
    results["load_average_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
