"""Models side by side through the CLI: index time per 1,000 documents, dense and default hybrid nDCG@10.

    .venv/bin/python benchmarks/models.py --model minilm=all-MiniLM-L6-v2 \\
        --model mpnet=/work/models/exports/all-mpnet-base-v2-onnx --json models.json

For each collection of ../shared/data (Cranfield, msmarco-5k), the models take turns (in
alternating order from one collection to the next, so that other jobs' load falls on each alike):

1. `embedkit index CORPUS --out IDX --model M` in a fresh process, timed on the wall clock: what a
   user waits for (embedding, FAISS, BM25, the fusion calibration a new index records);
2. `embedkit eval retrieval BEIR_DIR --index IDX --mode all --json`: nDCG@10 of dense search and of
   the index's default hybrid search, the same pipeline `embedkit search` runs.

Prints one row per (collection, model) and, per collection, each model's indexing time as a ratio to
the first model's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
COLLECTIONS = ("cranfield", "msmarco-5k")


def embedkit(*args: str) -> None:
    """Run the CLI as a user does, in its own process; stop on failure with its output."""
    result = subprocess.run([sys.executable, "-m", "embedkit.cli", *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: embedkit {' '.join(args)} exited {result.returncode}:\n{result.stderr[-2000:]}")


def documents(folder: Path) -> int:
    with (folder / "corpus.jsonl").open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def run_one(name: str, model: str, folder: Path, work: Path) -> dict[str, object]:
    index = work / f"{folder.name}-{name}"
    start = time.perf_counter()
    embedkit("index", str(folder / "corpus.jsonl"), "--out", str(index), "--model", model, "--device", "cpu")
    seconds = time.perf_counter() - start
    figures = work / f"{folder.name}-{name}.json"
    embedkit("eval", "retrieval", str(folder), "--index", str(index), "--mode", "all", "--json", str(figures))
    results = json.loads(figures.read_text())
    count = documents(folder)
    return {
        "collection": folder.name,
        "model": name,
        "documents": count,
        "index_seconds": seconds,
        "seconds_per_1000": 1000 * seconds / count,
        "results": results,
    }


def ndcg(results: dict, mode: str) -> float:
    """nDCG@10 of one mode in `eval retrieval --mode all --json` output."""
    return float(results["metrics"][mode]["ndcg@10"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", required=True, metavar="NAME=MODEL", help="A model to compare (repeat)."
    )
    parser.add_argument("--collections", default=",".join(COLLECTIONS))
    parser.add_argument("--json", type=Path, help="Write every figure to this file too.")
    args = parser.parse_args()
    models = [tuple(spec.split("=", 1)) for spec in args.model]
    rows = []
    with tempfile.TemporaryDirectory(prefix="embedkit-models-") as work:
        for turn, collection in enumerate(args.collections.split(",")):
            order = models if turn % 2 == 0 else models[::-1]
            for name, model in order:
                print(f"{collection}: {name} ...", file=sys.stderr, flush=True)
                rows.append(run_one(name, model, DATA / collection, Path(work)))
    header = f"{'collection':<12} {'model':<10} {'s / 1k docs':>11} {'x first':>8} {'dense':>7} {'hybrid':>7}"
    print(f"{header} fusion")
    for row in rows:
        first = next(r for r in rows if r["collection"] == row["collection"] and r["model"] == models[0][0])
        ratio = row["index_seconds"] / first["index_seconds"]
        results = row["results"]
        print(
            f"{row['collection']:<12} {row['model']:<10} {row['seconds_per_1000']:>11.1f} {ratio:>8.2f} "
            f"{ndcg(results, 'dense'):>7.4f} {ndcg(results, 'hybrid'):>7.4f} "
            f"{results.get('fusion')} {results.get('alpha')}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
