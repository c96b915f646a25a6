"""Beyond one machine: Ray embedding throughput, and IVF-PQ built from part files (time, memory, recall).

    python benchmarks/distributed.py embed --docs 5000 --workers 1 2
    python benchmarks/distributed.py index --vectors 1000000 --parts 10 --workdir /tmp/parts-1m

`embed`: the first `--docs` lines of `../shared/data/corpora/wiki1m-sample.txt`, embedded with the
bundled all-MiniLM-L6-v2 (its ONNX form, fp32) three ways on this machine: single-process
`embed_to_file` (ONNX Runtime's default threads: one per core), then `embed_with_ray` with 1, 2, ...
CPU actors of `--cpus-per-worker` CPUs each (that many ONNX Runtime threads). Times are wall clock
from the call to the files in place: the single-process figure includes opening the model, the Ray
figures include starting the actors and opening one model in each (the local Ray cluster itself
is started once, before, and its start time is printed apart). Every run's parts are checked
against the single-process output (max |difference|, equal ids).

`index`: `--vectors` synthetic unit vectors (384-d, around 1,000 centres, each cluster spread along
16 directions: `benchmarks/search.py`'s data, drawn part by part around one set of centres) written
as `--parts` part files with a .txt corpus of as many lines, then
`build_index_from_vectors(kind="ivf-pq", lexical=False)` in a child process: its wall time and peak
resident memory (`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`, which counts the pages of the
memory-mapped parts it touched). Recall@10 of the index (nprobe 16) against exact inner-product
search (faiss IndexFlatIP) over `--queries` held-out points of the same distribution.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def machine() -> dict:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "load": [round(x, 2) for x in load]}


# --- embedding throughput ---------------------------------------------------------------------------


def run_embed(args: argparse.Namespace) -> dict:
    import ray

    from embedkit.encode.loading import load_encoder
    from embedkit.jobs.distributed import embed_with_ray
    from embedkit.jobs.parts import read_parts
    from embedkit.jobs.streaming import CorpusOptions, embed_to_file

    source = Path(args.corpus)
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()][: args.docs]
    results: dict = {"docs": len(lines), "machine_before": machine(), "runs": []}
    options = CorpusOptions(batch_size=64)
    with tempfile.TemporaryDirectory(prefix="embedkit-bench-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        load_encoder(None, device="cpu")  # the ONNX export of the bundled model exists from here on
        began = time.perf_counter()
        encoder = load_encoder(None, device="cpu")
        embed_to_file(corpus, Path(tmp) / "single.npy", encoder, options=options)
        single_s = time.perf_counter() - began
        reference = np.load(Path(tmp) / "single.npy")
        ids = (Path(tmp) / "single.ids.txt").read_text().splitlines()
        results["runs"].append(
            {"how": "single process", "seconds": single_s, "per_second": len(lines) / single_s}
        )
        print(f"single process: {single_s:.1f} s, {len(lines) / single_s:.1f} sent/s", flush=True)
        began = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        results["ray_init_seconds"] = time.perf_counter() - began
        print(f"ray.init: {results['ray_init_seconds']:.1f} s", flush=True)
        try:
            for workers in args.workers:
                out = Path(tmp) / f"ray-{workers}"
                began = time.perf_counter()
                report = embed_with_ray(
                    corpus,
                    out,
                    None,
                    options=options,
                    device="cpu",
                    num_workers=workers,
                    cpus_per_worker=args.cpus_per_worker,
                )
                seconds = time.perf_counter() - began
                parts = read_parts(out)
                vectors = np.concatenate([np.load(p.npy) for p in parts])
                same_ids = [i for p in parts for i in p.read_ids()] == ids
                diff = float(np.max(np.abs(vectors - reference)))
                results["runs"].append(
                    {
                        "how": f"ray, {workers} actor(s) x {args.cpus_per_worker} CPU",
                        "seconds": seconds,
                        "per_second": len(lines) / seconds,
                        "max_abs_diff": diff,
                        "same_ids": same_ids,
                        "parts": report.parts,
                    }
                )
                print(
                    f"ray {workers} actor(s): {seconds:.1f} s, {len(lines) / seconds:.1f} sent/s, "
                    f"max |diff| {diff:.2e}, ids equal {same_ids}",
                    flush=True,
                )
        finally:
            ray.shutdown()
    results["machine_after"] = machine()
    return results


# --- IVF-PQ from parts --------------------------------------------------------------------------


class ClusteredSource:
    """`benchmarks/search.py`'s clustered data, drawn in pieces: fixed centres, points per piece."""

    def __init__(self, seed: int, dim: int = 384, clusters: int = 1000, local_dims: int = 16) -> None:
        rng = np.random.default_rng(seed)
        self.seed, self.dim = seed, dim
        self.centres = rng.standard_normal((clusters, dim)).astype(np.float32)
        self.bases = rng.standard_normal((clusters, local_dims, dim)).astype(np.float32) / np.sqrt(dim)

    def draw(self, n: int, piece: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, piece])
        out = np.empty((n, self.dim), dtype=np.float32)
        labels = rng.integers(0, len(self.centres), n)
        for start in range(0, n, 10_000):
            lab = labels[start : start + 10_000]
            coef = rng.standard_normal((len(lab), self.bases.shape[1])).astype(np.float32) * 4.0
            local = np.einsum("nk,nkd->nd", coef, self.bases[lab])
            noise = 0.3 * rng.standard_normal((len(lab), self.dim)).astype(np.float32)
            out[start : start + len(lab)] = self.centres[lab] + local + noise
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def write_parts(workdir: Path, n: int, parts: int, seed: int) -> tuple[Path, Path]:
    """`n` clustered vectors as `parts` part files, a .txt corpus of `n` lines, sidecars that check."""
    from embedkit.data.fingerprint import CorpusFingerprint
    from embedkit.encode.identity import model_fingerprint
    from embedkit.encode.model_folder import default_base_model_path, read_model_spec
    from embedkit.jobs.parts import PartInfo, Shard, part_paths

    folder, corpus = workdir / "parts", workdir / "corpus.txt"
    if (folder / f"part-{parts - 1}-of-{parts}.json").is_file() and corpus.is_file():
        return folder, corpus
    folder.mkdir(parents=True, exist_ok=True)
    spec = read_model_spec(default_base_model_path())  # 384-d: the parts claim the bundled model
    with corpus.open("w", encoding="utf-8") as fh:
        fh.writelines(f"synthetic document {i + 1}\n" for i in range(n))
    for index in range(parts):
        shard = Shard(index, parts)
        start, stop = shard.rows(n)
        vectors = ClusteredSource(seed).draw(stop - start, index)  # one set of centres, new points
        npy, ids, sidecar = part_paths(folder, shard)
        np.save(npy, vectors)
        fingerprint = CorpusFingerprint()
        for row in range(start, stop):
            fingerprint.add_fields(str(row + 1), "", f"synthetic document {row + 1}")
        ids.write_text("".join(f"{row + 1}\n" for row in range(start, stop)), encoding="utf-8")
        info = PartInfo(
            shard=index,
            shards=parts,
            start=start,
            count=stop - start,
            total=n,
            dim=384,
            model=str(spec.path),
            model_fingerprint=model_fingerprint(spec),
            model_backend="onnx",
            max_seq_length=spec.max_seq_length,
            normalized=None,
            corpus=str(corpus),
            corpus_fingerprint=fingerprint.hex,
        )
        sidecar.write_text(json.dumps(info.to_json()), encoding="utf-8")
        print(f"wrote {shard.name} ({stop - start:,} vectors)", flush=True)
    return folder, corpus


def run_index(args: argparse.Namespace) -> dict:
    import faiss

    workdir = Path(args.workdir)
    folder, corpus = write_parts(workdir, args.vectors, args.parts, args.seed)
    out = workdir / "index"
    results: dict = {"vectors": args.vectors, "parts": args.parts, "machine_before": machine()}
    # The child times faiss's train and add calls (wrapped) beside the whole build: the two phases
    # grow differently with n (see the README), which an extrapolation needs.
    code = (
        "import sys, time, json, faiss\n"
        "from embedkit import build_index_from_vectors\n"
        "spent = {'train': 0.0, 'add': 0.0}\n"
        "def timed(name, method):\n"
        "    def run(self, *args):\n"
        "        t = time.perf_counter()\n"
        "        try:\n"
        "            return method(self, *args)\n"
        "        finally:\n"
        "            spent[name] += time.perf_counter() - t\n"
        "    return run\n"
        "faiss.IndexIVFPQ.train = timed('train', faiss.IndexIVFPQ.train)\n"
        "faiss.IndexIVFPQ.add = timed('add', faiss.IndexIVFPQ.add)\n"
        "t = time.perf_counter()\n"
        "r = build_index_from_vectors(sys.argv[1], sys.argv[2], sys.argv[3], kind='ivf-pq', overwrite=True,"
        " lexical=False)\n"
        "print(json.dumps({'seconds': time.perf_counter() - t, 'train_seconds': spent['train'],"
        " 'add_seconds': spent['add'], 'params': r.params}))\n"
    )
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(corpus), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    results["build_wall_seconds"] = time.perf_counter() - began
    results.update(json.loads(done.stdout.strip().splitlines()[-1]))
    results["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    print(
        f"build: {results['seconds']:.1f} s (train {results['train_seconds']:.1f} s, add "
        f"{results['add_seconds']:.1f} s), peak RSS {results['peak_rss_mib']:.0f} MiB, {results['params']}",
        flush=True,
    )

    from embedkit.index import INDEX_FILE, SearchIndex
    from embedkit.index.folder import index_files_dir
    from embedkit.jobs.parts import read_parts

    queries = ClusteredSource(args.seed).draw(args.queries, 1_000_000)  # held out: a piece of its own
    flat = faiss.IndexFlatIP(384)
    for part in read_parts(folder):
        flat.add(np.ascontiguousarray(part.vectors()))
    began = time.perf_counter()
    _, exact = flat.search(queries, 10)
    results["flat_search_seconds"] = time.perf_counter() - began
    del flat
    with SearchIndex.load(out) as index:
        began = time.perf_counter()
        _, found = index.search(queries, k=10)
        results["ivf_search_seconds"] = time.perf_counter() - began
    rows = [{int(doc_id) - 1 for doc_id in row} for row in found]
    results["recall_at_10"] = float(
        np.mean([len(r & set(e.tolist())) / 10 for r, e in zip(rows, exact, strict=True)])
    )
    results["index_bytes"] = (index_files_dir(out) / INDEX_FILE).stat().st_size  # the live version's
    results["machine_after"] = machine()
    print(
        f"recall@10 {results['recall_at_10']:.3f} over {args.queries} queries; index.faiss "
        f"{results['index_bytes'] / 2**20:.0f} MiB",
        flush=True,
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    embed = sub.add_parser("embed", help="Ray actors vs single-process embed")
    embed.add_argument("--corpus", default=str(DATA / "corpora" / "wiki1m-sample.txt"))
    embed.add_argument("--docs", type=int, default=5000)
    embed.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    embed.add_argument("--cpus-per-worker", type=int, default=1)
    index = sub.add_parser("index", help="IVF-PQ from part files: time, peak memory, recall@10")
    index.add_argument("--vectors", type=int, default=1_000_000)
    index.add_argument("--parts", type=int, default=10)
    index.add_argument("--queries", type=int, default=1000)
    index.add_argument("--seed", type=int, default=0)
    index.add_argument("--workdir", required=True, help="where the parts, corpus and index go (kept)")
    for command in (embed, index):
        command.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = run_embed(args) if args.what == "embed" else run_index(args)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
