"""Scale benchmark: memory, disk, build time, search latency and recall at 100k to 1M documents,
and a 10M projection, through `embedkit index --from-vectors` and `SearchIndex.search_text`.

    python benchmarks/scale.py --sizes 100000,300000,1000000 --work /tmp/scale --json scale.json

Documents are real text: each is three sentences (58 words on average) drawn (fixed seed) from the
shared Wikipedia sample, so the document store and the BM25 index hold text of a real vocabulary.
Their vectors are **composed, not embedded** (embedding 1M documents takes hours on 2 cores): the
bundled model embeds each sentence once, and a document's vector is the mean of its three
sentences' vectors, normalized. They keep what quantization depends on (each dimension's offset and
range, the correlations between dimensions) and a neighbourhood structure tied to the text
(documents that share a sentence, or hold similar ones, are near each other), but they are not the
model's vectors of the documents: the latency, memory and recall figures are what this measures,
not the quality of the hits.

Queries are held-out sentences (never in a document), embedded by the bundled model at search time.
The vectors reach the index as `embedkit embed --shard` part files would (`embed_shard` with an
encoder that hands out the composed vectors under the bundled model's identity); `embedkit index
--from-vectors` builds each configuration in a child process (`/usr/bin/time`: wall seconds, peak
RSS). Each index is then opened in a fresh child process that runs the queries one at a time
through `SearchIndex.search_text` (dense, and hybrid with the default fusion): per-query p50/p99,
and the process's private memory (`RssAnon`) after opening and after the queries; the float vectors
a quantized index rescores with are memory-mapped and count as page cache (`RssFile`), not private
memory. Recall@10 is the share of the exact top 10 (numpy over the float vectors, in float64) in
each index's dense top 10.

The 10M row projects each figure from the two largest sizes measured, by the power of size that
joins them (disk and memory grow linearly; latency of exact scans too; HNSW more slowly).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS = {  # name: `embedkit index` options
    "float flat": ["--kind", "flat"],
    "int8 flat": ["--kind", "flat", "--quantize", "int8"],
    "binary flat": ["--kind", "flat", "--quantize", "binary"],
    "binary hnsw": ["--kind", "hnsw", "--quantize", "binary"],
    "int8 hnsw": ["--kind", "hnsw", "--quantize", "int8"],
    "float hnsw": ["--kind", "hnsw"],
}
SENTENCES_PER_DOC = 3
K = 10


# --- the collection ------------------------------------------------------------------------------


def read_sentences(path: Path, held_out: int) -> tuple[list[str], list[str]]:
    """(document sentences, query sentences): the file's distinct lines of 5+ words, shuffled with a
    fixed seed; the last `held_out` are queries and never appear in a document."""
    seen = dict.fromkeys(line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    lines = [line for line in seen if len(line.split()) >= 5]
    order = np.random.default_rng(0).permutation(len(lines))
    shuffled = [lines[i] for i in order]
    return shuffled[:-held_out], shuffled[-held_out:]


def document_picks(sentences: list[str], n: int, seed: int) -> np.ndarray:
    """Which sentences make each of `n` documents: [n, SENTENCES_PER_DOC] indices, fixed seed."""
    return np.random.default_rng(seed).integers(0, len(sentences), size=(n, SENTENCES_PER_DOC))


def document_texts(sentences: list[str], picks: np.ndarray) -> list[str]:
    return [" ".join(sentences[i] for i in row) for row in picks]


def write_corpus(path: Path, texts: list[str]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps({"_id": f"d{i}", "text": text}) + "\n")


class ComposedVectors:
    """An `Encoder` that gives each document, in corpus order, the normalized mean of its sentences'
    vectors, under another encoder's identity (path, fingerprint, backend, length), so that its
    part files index as that model's."""

    def __init__(self, model: Any, sentence_vectors: np.ndarray, picks: np.ndarray) -> None:
        self.sentence_vectors, self.picks, self.next = sentence_vectors, picks, 0
        self.backend, self.path, self.dim = model.backend, model.path, model.dim
        self.max_seq_length, self.device = model.max_seq_length, model.device
        self.fingerprint, self.truncated = model.fingerprint, 0

    def encode(self, texts, batch_size: int = 64, normalize: bool | None = None, progress: bool = False):
        rows = self.picks[self.next : self.next + len(texts)]
        self.next += len(texts)
        composed = self.sentence_vectors[rows].mean(axis=1)
        return (composed / np.linalg.norm(composed, axis=1, keepdims=True)).astype(np.float32)


def make_collection(work: Path, size: int, sentences: list[str], model: Any, sentence_vectors) -> Path:
    """`work/size/`: corpus.jsonl and parts/ (one part of composed vectors), made once."""
    from embedkit.jobs.parts import Shard
    from embedkit.jobs.sharding import embed_shard

    folder = work / str(size)
    if (folder / "parts" / "part-0-of-1.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    picks = document_picks(sentences, size, seed=size)
    write_corpus(folder / "corpus.jsonl", document_texts(sentences, picks))
    composed = ComposedVectors(model, sentence_vectors, picks)
    embed_shard(folder / "corpus.jsonl", folder / "parts", Shard(0, 1), composed)
    return folder


# --- building and measuring -------------------------------------------------------------------


def build(folder: Path, name: str) -> dict[str, Any]:
    """`embedkit index --from-vectors` of one configuration: wall seconds, peak RSS, disk bytes."""
    out = folder / name.replace(" ", "-")
    if out.exists():
        shutil.rmtree(out)
    embedkit = str(Path(sys.executable).with_name("embedkit"))
    command = ["/usr/bin/time", "-f", "TIME %e %M", embedkit, "index", str(folder / "corpus.jsonl")]
    command += ["--from-vectors", str(folder / "parts"), "--out", str(out), *CONFIGS[name]]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{name}: embedkit index failed:\n{done.stderr[-2000:]}")
    wall, peak_kb = re.findall(r"TIME ([\d.]+) (\d+)", done.stderr)[-1]
    disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "index": str(out),
        "build_s": float(wall),
        "build_peak_mib": int(peak_kb) / 1024,
        "disk_mib": disk / 2**20,
    }


def private_mib() -> tuple[float, float]:
    """(RssAnon, RssFile) of this process in MiB."""
    status = Path("/proc/self/status").read_text()
    anon = int(re.search(r"RssAnon:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    file = int(re.search(r"RssFile:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return anon / 1024, file / 1024


def measure(index_dir: str, queries: list[str], warmup: int) -> dict[str, Any]:
    """In a fresh process: memory after opening, per-query latency of dense and hybrid search
    (the default fusion), the dense top-10 ids, memory after the queries."""
    from embedkit import SearchIndex

    before = private_mib()
    index = SearchIndex.load(index_dir)
    encoder = index.encoder()
    opened = private_mib()
    figures: dict[str, Any] = {"private_mib_base": before[0], "private_mib_open": opened[0]}
    for mode in ("dense", "hybrid"):
        for text in queries[:warmup]:
            index.search_text(text, k=K, encoder=encoder, mode=mode)
        times, ids = [], []
        for text in queries:
            start = time.perf_counter()
            hits = index.search_text(text, k=K, encoder=encoder, mode=mode)
            times.append(time.perf_counter() - start)
            ids.append([hit.id for hit in hits[0]])
        times_ms = np.array(times) * 1000
        figures[f"{mode}_p50_ms"] = float(np.percentile(times_ms, 50))
        figures[f"{mode}_p99_ms"] = float(np.percentile(times_ms, 99))
        figures[f"{mode}_ids"] = ids
    figures["private_mib_after"], figures["file_mib_after"] = private_mib()
    return figures


def measured_in_child(index_dir: str, queries_file: Path, warmup: int) -> dict[str, Any]:
    script = Path(__file__).resolve()
    command = [sys.executable, str(script), "--measure", index_dir, "--queries-file", str(queries_file)]
    done = subprocess.run([*command, "--warmup", str(warmup)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"measuring {index_dir} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def exact_top(folder: Path, query_vectors: np.ndarray) -> list[list[str]]:
    """Exact cosine top 10 of each query over the part's float vectors, in float64, read in blocks
    (`embedkit.search.exact`, ties to the lower row)."""
    from embedkit.search.exact import exact_top_k_of_blocks

    vectors = np.load(folder / "parts" / "part-0-of-1.npy", mmap_mode="r")

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, len(vectors), 100_000):
            block = np.asarray(vectors[start : start + 100_000], dtype=np.float64)
            yield block / np.linalg.norm(block, axis=1, keepdims=True)

    _, best_rows = exact_top_k_of_blocks(query_vectors.astype(np.float64), blocks(), K)
    return [[f"d{r}" for r in row] for row in best_rows]


def recall(found: list[list[str]], exact: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(b)) / K for a, b in zip(found, exact, strict=True)]))


def projected(rows: list[dict[str, Any]], name: str, target: int) -> dict[str, float]:
    """Each figure of `name` at `target` documents, by the power law through its two largest sizes."""
    mine = sorted((r for r in rows if r["config"] == name), key=lambda r: r["size"])[-2:]
    if len(mine) < 2:
        return {}
    (a, b), out = mine, {}
    for key in ("build_s", "disk_mib", "private_mib_after", "dense_p50_ms", "hybrid_p50_ms"):
        if a[key] > 0 and b[key] > 0:
            power = np.log(b[key] / a[key]) / np.log(b["size"] / a["size"])
            out[key] = float(b[key] * (target / b["size"]) ** power)
    return out


def markdown(rows: list[dict[str, Any]], projections: dict[str, dict[str, float]]) -> str:
    head = "| documents | vectors | build s | disk MiB | RAM MiB | dense p50 / p99 ms | hybrid p50 / p99 ms "
    head += "| recall@10 |"
    lines = [head, "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['size']:,} | {r['config']} | {r['build_s']:.0f} | {r['disk_mib']:,.0f} | "
            f"{r['private_mib_after']:,.0f} | {r['dense_p50_ms']:.1f} / {r['dense_p99_ms']:.1f} | "
            f"{r['hybrid_p50_ms']:.1f} / {r['hybrid_p99_ms']:.1f} | {r['recall@10']:.3f} |"
        )
    for name, p in projections.items():
        if p:
            lines.append(
                f"| 10,000,000 (projected) | {name} | {p['build_s']:.0f} | {p['disk_mib']:,.0f} | "
                f"{p['private_mib_after']:,.0f} | {p['dense_p50_ms']:.1f} / - | "
                f"{p['hybrid_p50_ms']:.1f} / - | - |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--configs", default="float flat,int8 flat,binary flat,binary hnsw")
    parser.add_argument("--small-configs", default="int8 hnsw,float hnsw", help="only at the smallest size")
    parser.add_argument("--work", type=Path, default=Path("/tmp/embedkit-scale"))
    parser.add_argument("--sentences", type=Path, default=Path("../shared/data/corpora/wiki1m-sample.txt"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        queries = json.loads(args.queries_file.read_text())
        print(json.dumps(measure(args.measure, queries, args.warmup)))
        return

    from embedkit.encode.loading import load_encoder

    args.work.mkdir(parents=True, exist_ok=True)
    sentences, queries = read_sentences(args.sentences, args.queries)
    queries_file = args.work / "queries.json"
    queries_file.write_text(json.dumps(queries))
    model = load_encoder(None, device="cpu")
    cached = args.work / "sentence-vectors.npy"
    if not cached.is_file():
        np.save(cached, model.encode(sentences, normalize=True, progress=True))
    sentence_vectors = np.load(cached)
    query_vectors = model.encode(queries, normalize=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        started = time.perf_counter()
        folder = make_collection(args.work, size, sentences, model, sentence_vectors)
        print(
            f"{size:,} documents: collection ready in {time.perf_counter() - started:.0f} s", file=sys.stderr
        )
        exact = exact_top(folder, query_vectors)
        names = args.configs.split(",") + (args.small_configs.split(",") if size == sizes[0] else [])
        for name in [n for n in names if n]:
            row = {"size": size, "config": name, **build(folder, name)}
            row |= measured_in_child(row["index"], queries_file, args.warmup)
            row["recall@10"] = recall(row.pop("dense_ids"), exact)
            row.pop("hybrid_ids")
            rows.append(row)
            print(markdown([row], {}).splitlines()[-1], file=sys.stderr, flush=True)
            shutil.rmtree(row["index"])  # disk: the next configuration's build
    projections = {
        name: projected(rows, name, 10_000_000) for name in dict.fromkeys(r["config"] for r in rows)
    }
    print(markdown(rows, projections))
    if args.json:
        machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()}
        args.json.write_text(
            json.dumps({"machine": machine, "rows": rows, "projected_10m": projections}, indent=2)
        )


if __name__ == "__main__":
    main()
