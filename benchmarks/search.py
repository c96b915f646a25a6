"""Search benchmark: index build time, queries/s and recall@10 of HNSW against exact search.

    python benchmarks/search.py                       # 100k clustered 384-d vectors, the default grid
    python benchmarks/search.py --vectors emb.npy     # real embeddings (e.g. from `embedkit embed`)
    python benchmarks/search.py --cold-start INDEX_DIR --query "shock waves"   # `embedkit search` wall time
    python benchmarks/search.py --device cuda --n 1000000 --queries 1000   # faiss GPU against faiss-cpu

Synthetic data: unit vectors drawn around `--clusters` random centres, each cluster spread along
its own `--local-dims` directions (plus a little isotropic noise), so that neighbourhoods have a low
intrinsic dimension as sentence embeddings do; a larger `--local-dims` is a harder case. Uniform
random vectors are a degenerate case for graph indexes (every point is about equally far from every
other) and are not what an index serves.

Queries are held-out points of the same distribution. Recall@10 = |HNSW top-10 ∩ exact top-10| / 10,
averaged over queries. Timings are medians of `--repeats` runs in this process; "batched" is one
`search` call over all queries (faiss parallelises over queries), "one at a time" a Python loop of
single-query calls. Ratios are within one run, on one machine. Prints a markdown table and, with
`--json`, writes every figure.

`--device cuda` compares faiss on the GPU with faiss-cpu on all cores instead of the HNSW grid: the
flat and ivf-pq indexes `embedkit index` builds (embedkit's parameters for `--n` vectors), built and
searched on the CPU, then moved to the GPU and built and searched there as `index --device cuda`
does (`embedkit.index.faiss_gpu`). Recall@10 is against the CPU's exact (flat) search, so the GPU's
flat recall is 1.000 where both find the same neighbours; "x CPU" is the GPU's batched queries/s over
the CPU's for the same kind. `--device cpu` runs the CPU half alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def clustered_vectors(n: int, dim: int, clusters: int, local_dims: int, seed: int) -> np.ndarray:
    """n unit vectors: centre + spread in the cluster's own `local_dims`-d subspace + isotropic noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    bases = rng.standard_normal((clusters, local_dims, dim)).astype(np.float32) / np.sqrt(dim)
    labels = rng.integers(0, clusters, n)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 10_000):
        lab = labels[start : start + 10_000]
        coef = rng.standard_normal((len(lab), local_dims)).astype(np.float32) * 4.0
        local = np.einsum("nk,nkd->nd", coef, bases[lab])
        noise = 0.3 * rng.standard_normal((len(lab), dim)).astype(np.float32)
        out[start : start + len(lab)] = centres[lab] + local + noise
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of `repeats` calls of fn(), and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def recall_at(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact, strict=True)]))


def search_rates(index, queries: np.ndarray, single: int, repeats: int) -> dict[str, float]:
    batched_s, (_, found) = timed(lambda: index.search(queries, 10), repeats)
    one = queries[:single]
    single_s, _ = timed(lambda: [index.search(one[i : i + 1], 10) for i in range(len(one))], repeats)
    return {"batched_qps": len(queries) / batched_s, "single_qps": len(one) / single_s, "found": found}


def run_grid(docs: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> dict:
    import faiss

    from embedkit.index import index_params, new_faiss_index

    dim = docs.shape[1]
    flat = faiss.IndexFlatIP(dim)
    flat_build, _ = timed(lambda: flat.add(docs), 1)
    flat_rates = search_rates(flat, queries, args.single, args.repeats)
    exact = flat_rates.pop("found")
    results = {"flat": {"build_s": flat_build, **flat_rates}, "hnsw": []}
    print(
        f"flat: build {flat_build:.2f} s, {flat_rates['batched_qps']:,.0f} q/s batched, "
        f"{flat_rates['single_qps']:,.0f} q/s one at a time",
        flush=True,
    )
    defaults = index_params("hnsw", len(docs), dim)
    for m in args.m:
        for ef_construction in args.ef_construction:
            params = {"M": m, "ef_construction": ef_construction, "ef_search": 16}
            index = new_faiss_index("hnsw", dim, params)
            build_s, _ = timed(lambda index=index: index.add(docs), 1)
            for ef_search in args.ef_search:
                index.hnsw.efSearch = ef_search
                rates = search_rates(index, queries, args.single, args.repeats)
                row = {
                    "M": m,
                    "ef_construction": ef_construction,
                    "ef_search": ef_search,
                    "build_s": build_s,
                    "recall@10": recall_at(rates.pop("found"), exact, 10),
                    **rates,
                    "speedup_batched": rates["batched_qps"] / flat_rates["batched_qps"],
                    "default": {"M": m, "ef_construction": ef_construction, "ef_search": ef_search}
                    == defaults,
                }
                results["hnsw"].append(row)
                print(
                    f"M={m} efC={ef_construction} efS={ef_search}: build {build_s:.1f} s, "
                    f"recall@10 {row['recall@10']:.3f}, {row['batched_qps']:,.0f} q/s batched "
                    f"({row['speedup_batched']:.1f}x flat), {row['single_qps']:,.0f} q/s one at a time",
                    flush=True,
                )
    return results


def fill(index, docs: np.ndarray, kind: str) -> None:
    """Add `docs` to a new index as `embedkit index` does (an IVF-PQ index trains on its sample first)."""
    from embedkit.index.kinds import train_ivf

    if kind == "ivf-pq":
        train_ivf(index, docs, chunk_size=100_000)
    else:
        index.add(docs)


def run_devices(docs: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> dict:
    """Each of `args.kinds` built and searched by faiss-cpu, then (with --device cuda) on the GPU."""
    import faiss

    from embedkit.encode.runtime import Runtime
    from embedkit.index import index_params, new_faiss_index
    from embedkit.index.faiss_gpu import placement_for

    dim = docs.shape[1]
    reference = faiss.IndexFlatIP(dim)
    reference.add(docs)
    _, exact = reference.search(queries, 10)
    devices = ("cpu", "cuda") if args.device == "cuda" else ("cpu",)
    rows = []
    for kind in args.kinds.split(","):
        params = index_params(kind, len(docs), dim)
        for device in devices:
            placement = placement_for(
                Runtime(device)
            )  # None on the CPU; faiss without GPU support: InputError
            index = new_faiss_index(kind, dim, params)
            work = placement.to_gpu(index, kind) if placement else index
            build_s, _ = timed(lambda work=work, kind=kind: fill(work, docs, kind), 1)
            rates = search_rates(work, queries, args.single, args.repeats)
            row = {
                "kind": kind,
                "device": placement.name if placement else "cpu",
                "params": params,
                "build_s": build_s,
                "recall@10": recall_at(rates.pop("found"), exact, 10),
                **rates,
            }
            cpu = [r for r in rows if r["kind"] == kind and r["device"] == "cpu"]
            row["x_cpu_batched"] = row["batched_qps"] / cpu[0]["batched_qps"] if cpu else 1.0
            rows.append(row)
            print(
                f"{kind} on {row['device']}: build {build_s:.2f} s, recall@10 {row['recall@10']:.4f}, "
                f"{row['batched_qps']:,.0f} q/s batched ({row['x_cpu_batched']:.1f}x CPU), "
                f"{row['single_qps']:,.0f} q/s one at a time",
                flush=True,
            )
    return {"devices": rows}


def devices_markdown(rows: list[dict]) -> str:
    lines = [
        "| index | faiss on | build s | recall@10 | batched q/s | x CPU | one-at-a-time q/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['device']} | {r['build_s']:.2f} | {r['recall@10']:.4f} | "
            f"{r['batched_qps']:,.0f} | {r['x_cpu_batched']:.1f} | {r['single_qps']:,.0f} |"
        )
    return "\n".join(lines)


def markdown(results: dict) -> str:
    flat = results["flat"]
    lines = [
        "| index | M | efC | efS | build s | recall@10 | batched q/s | x flat | one-at-a-time q/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| flat | | | | {flat['build_s']:.2f} | 1.000 | {flat['batched_qps']:,.0f} | 1.0 "
        f"| {flat['single_qps']:,.0f} |",
    ]
    for r in results["hnsw"]:
        name = "hnsw (default)" if r["default"] else "hnsw"
        lines.append(
            f"| {name} | {r['M']} | {r['ef_construction']} | {r['ef_search']} | {r['build_s']:.1f} | "
            f"{r['recall@10']:.3f} | {r['batched_qps']:,.0f} | {r['speedup_batched']:.1f} "
            f"| {r['single_qps']:,.0f} |"
        )
    return "\n".join(lines)


def cold_start(index_dir: str, query: str, repeats: int, model: str | None) -> dict:
    """Wall time of `embedkit search INDEX_DIR QUERY` in a fresh process, `repeats` times, and the
    CPU time (user + sys) each process used: on shared cores the wall time includes waiting for
    a core, the CPU time does not."""
    import resource

    exe = Path(sys.executable).with_name("embedkit")
    command = [str(exe), "search", index_dir, query, "-k", "10", "--json"]
    if model:
        command += ["--model", model]
    times, cpu = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {
        "command": " ".join(command),
        "median_s": statistics.median(times),
        "min_s": min(times),
        "all_s": times,
        "median_cpu_s": statistics.median(cpu),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100_000, help="database vectors (synthetic)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--local-dims", type=int, default=16, help="intrinsic dimension of each cluster")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--single", type=int, default=200, help="queries timed one at a time")
    parser.add_argument("--vectors", help="a .npy of real embeddings instead of synthetic data")
    parser.add_argument("--m", type=int, nargs="+", default=[16, 32, 48])
    parser.add_argument("--ef-construction", type=int, nargs="+", default=[40, 80, 200])
    parser.add_argument("--ef-search", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, help="faiss threads (default: all cores)")
    parser.add_argument(
        "--cold-start", metavar="INDEX_DIR", help="time `embedkit search` on this index instead"
    )
    parser.add_argument("--query", default="what is the effect of shock waves on a wing")
    parser.add_argument("--model", help="with --cold-start: pass --model to embedkit search")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        help="compare faiss on the GPU (cuda) with faiss-cpu instead of the HNSW grid; cpu: the CPU half",
    )
    parser.add_argument("--kinds", default="flat,ivf-pq", help="with --device: the index kinds compared")
    args = parser.parse_args()

    import faiss

    from embedkit.encode.runtime import Runtime
    from embedkit.errors import InputError
    from embedkit.index.faiss_gpu import faiss_gpu_for

    try:
        faiss_gpu_for(Runtime(args.device or "cpu"))  # a faiss without GPU support: one line, before any work
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    machine = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss": faiss.__version__,
        "faiss_gpus": faiss.get_num_gpus(),
    }
    if args.cold_start:
        result = {
            "machine": machine,
            "cold_start": cold_start(args.cold_start, args.query, args.repeats, args.model),
        }
        print(json.dumps(result, indent=2))
    else:
        if args.vectors:
            data = np.load(args.vectors).astype(np.float32)
            data /= np.linalg.norm(data, axis=1, keepdims=True)
            rng = np.random.default_rng(0)
            order = rng.permutation(len(data))
            queries, docs = data[order[: args.queries]], data[order[args.queries :]]
            source = f"{args.vectors}: {len(docs):,} database vectors, {len(queries):,} held-out queries"
        else:
            data = clustered_vectors(args.n + args.queries, args.dim, args.clusters, args.local_dims, seed=0)
            docs, queries = data[: args.n], data[args.n :]
            source = f"synthetic clustered: {args.n:,} x {args.dim}, {args.clusters} clusters"
            source += f" of {args.local_dims}-d, {args.queries} held-out queries"
        print(f"{source}; {machine}", flush=True)
        docs, queries = np.ascontiguousarray(docs), np.ascontiguousarray(queries)
        if args.device:
            results = run_devices(docs, queries, args)
            print(devices_markdown(results["devices"]))
        else:
            results = run_grid(docs, queries, args)
            print(markdown(results))
        result = {"machine": machine, "data": source, **results}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
