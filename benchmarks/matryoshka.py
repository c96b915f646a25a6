"""Retrieval quality at fewer dimensions: dense nDCG@10 of model folders with their vectors cut to the
first N dimensions and renormalized, on BEIR folders.

Each model embeds each collection's documents and queries once, at full size (the torch backend,
`TorchEncoder`, for every folder, so the base and the trained models run the same code); each size is
then scored by the real `RetrievalEvaluator` (exact cosine search, BEIR's nDCG@10 from
`embedkit.evaluation.metrics`) through `TruncatedEncoder` (`truncate_vectors(full, N)`), the library's one
truncation, as `index --dim` uses it. `base` names the bundled all-MiniLM-L6-v2. The models are trained
beforehand with `embedkit train` (with and without `--matryoshka`); see benchmarks/README.md.

    python benchmarks/matryoshka.py base runs/plain runs/mrl --dims 384,256,128,64 \
        --beir ../shared/data/cranfield --beir ../shared/data/msmarco-5k --json mrl.json

`--rotate-on own|CORPUS` scores each model with its vectors first rotated onto their principal axes
(`embedkit.training.rotation`, what `train --matryoshka` starts from), fitted on 1,000 documents of
each collection itself (`own`) or of CORPUS: what the rotation alone does, without training.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from embedkit.encode.caching import CachingEncoder
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.encode.truncated_encoder import TruncatedEncoder
from embedkit.encode.wrapping import EncoderWrapper
from embedkit.evaluation.retrieval import RetrievalEvaluator

METRIC = "ndcg@10"


class RotatedEncoder(EncoderWrapper):
    """Another encoder's unit vectors times `axes.T` (a rotation: cosines unchanged); the rest
    (dimension, folder, fingerprint) is the wrapped encoder's (`EncoderWrapper`)."""

    def __init__(self, encoder: Any, axes: Any) -> None:
        super().__init__(encoder)
        self.axes = axes

    def encode_texts(self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool) -> Any:
        full = self.encoder.encode(list(texts), batch_size=batch_size, normalize=True, progress=progress)
        return full @ self.axes.T


def rotated(encoder: Any, corpus: Path, batch_size: int) -> RotatedEncoder:
    """`encoder` rotated onto the principal axes of its vectors of 1,000 of `corpus`'s documents,
    drawn as `train --matryoshka` draws them (seed 42)."""
    from embedkit.training.config import TrainConfig
    from embedkit.training.rotation import principal_axes, rotation_documents

    documents = rotation_documents(corpus, TrainConfig())
    vectors = encoder.encode(documents, batch_size=batch_size, normalize=True)
    return RotatedEncoder(encoder, principal_axes(vectors))


def score_model(
    model: str, collections: list[Path], dims: list[int], batch_size: int, rotate_on: str | None = None
) -> dict[str, Any]:
    """{collection: {dim: nDCG@10}} of one model folder (`base`: the bundled model), and its seconds."""
    started = time.perf_counter()
    path = None if model == "base" else model
    scores: dict[str, dict[int, float]] = {}
    for beir in collections:
        evaluator = RetrievalEvaluator(beir, metrics=(METRIC,), batch_size=batch_size, mode="dense")
        cached = CachingEncoder(TorchEncoder(path, device="cpu"))  # one embedding, every size
        if rotate_on:
            cached = rotated(cached, beir if rotate_on == "own" else Path(rotate_on), batch_size)
        scores[beir.name] = {m: evaluator(TruncatedEncoder(cached, m))[METRIC] for m in dims}
    meta_path = Path(model) / "embedkit.json" if path else None
    trained_at = json.loads(meta_path.read_text()).get("matryoshka_dims") if meta_path else None
    return {
        "scores": scores,
        "seconds": round(time.perf_counter() - started, 1),
        "matryoshka_dims": trained_at,
    }


def table(results: dict[str, dict[str, Any]], dims: list[int]) -> str:
    """Markdown: nDCG@10 x100 per model, collection and size; the share of the model's own largest size."""
    top = max(dims)
    head = ["model", "collection", *(f"{m}" for m in dims), *(f"{m} / {top}" for m in dims if m != top)]
    lines = [
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + " |",
    ]
    for model, result in results.items():
        for collection, by_dim in result["scores"].items():
            values = [f"{100 * by_dim[m]:.2f}" for m in dims]
            shares = [f"{by_dim[m] / by_dim[top]:.3f}" for m in dims if m != top]
            lines.append("| " + " | ".join([model, collection, *values, *shares]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="+", help="model folders; `base` for the bundled all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="384,256,128,64", help="sizes to keep, the full size first")
    parser.add_argument(
        "--beir", type=Path, action="append", help="BEIR folders (default: Cranfield, msmarco-5k)"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", type=Path, help="write the scores here")
    parser.add_argument(
        "--rotate-on", help="rotate onto principal axes fitted on `own` (each collection) or this corpus"
    )
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    dims = [int(x) for x in args.dims.split(",")]
    data = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
    collections = args.beir or [data / "cranfield", data / "msmarco-5k"]
    results = {}
    for model in args.models:
        results[model] = score_model(model, collections, dims, args.batch_size, args.rotate_on)
        print(f"{model}: {results[model]['seconds']} s", flush=True)
    print(table(results, dims))
    if args.json:
        args.json.write_text(json.dumps({"dims": dims, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
