"""Shared by the runtime tests: an encoder with known vectors, clustered data, corpus writers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedkit.encode.identity import model_fingerprint


class TableEncoder:
    """An encoder whose vectors are given: text -> row of a table. It claims to be `model_dir`'s model.

    Lets the index tests control the vectors exactly (no ties, clusters) while the index still
    records and checks a real model folder's fingerprint and dim.
    """

    backend = "table"
    device = "cpu"
    max_seq_length = 64
    truncated = 0

    def __init__(self, model_dir: Path, table: dict[str, np.ndarray], dim: int | None = None) -> None:
        """`table` may be empty when `dim` is given: every text then gets the vector its hash fixes."""
        self.path = model_dir
        self.fingerprint = model_fingerprint(model_dir)
        self.table = table
        self.dim = dim if dim is not None else len(next(iter(table.values())))

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 64,
        normalize: bool | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        rows = [self.table[t] if t in self.table else self._unknown(t) for t in texts]
        out = np.stack(rows).astype(np.float32)
        if normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def _unknown(self, text: str) -> np.ndarray:
        """A text outside the table (an index's calibration queries): a vector fixed by the text."""
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim)


def clustered(n: int, dim: int, clusters: int, seed: int, local_dims: int = 8) -> np.ndarray:
    """Unit vectors around random centres, each cluster spread along its own few directions.

    Neighbourhoods of low intrinsic dimension, as sentence embeddings have (uniform random vectors
    are a degenerate case for graph indexes). `seed` fixes the centres and the points alike.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    bases = rng.standard_normal((clusters, local_dims, dim)) / np.sqrt(dim)
    labels = rng.integers(0, clusters, n)
    local = np.einsum("nk,nkd->nd", 4.0 * rng.standard_normal((n, local_dims)), bases[labels])
    points = centres[labels] + local + 0.3 * rng.standard_normal((n, dim)) / np.sqrt(dim / 64)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32)


def write_jsonl(path: Path, ids: Sequence[str], texts: Sequence[str]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for doc_id, text in zip(ids, texts, strict=True):
            f.write(json.dumps({"_id": doc_id, "text": text}) + "\n")
    return path


def brute_force(docs: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by cosine similarity, in float64: (scores [q, k], doc positions [q, k])."""
    d = docs.astype(np.float64)
    q = queries.astype(np.float64)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    scores = q @ d.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def is_png(path: Path) -> bool:
    """Whether `path` is a non-empty file with the PNG signature."""
    return path.is_file() and path.stat().st_size > 8 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def set_recorded_fusion(out: Path, record: object) -> None:
    """Rewrite the live version's recorded fusion (`IndexMeta.fusion`) and its checksums."""
    from embedkit.index.folder import index_files_dir
    from embedkit.storage.checksums import write_checksums

    folder = index_files_dir(out)
    meta = json.loads((folder / "embedkit-index.json").read_text())
    meta["fusion"] = record
    (folder / "embedkit-index.json").write_text(json.dumps(meta))
    (folder / "checksums.json").unlink()
    write_checksums(folder)


def invoke_with_deadline(args: Sequence[str], deadline_s: float = 120) -> tuple[int, str]:
    """Exit code and stderr of `embedkit ARGS` run in-process; past `deadline_s` the test fails (a hang).

    The command runs on a daemon thread: one stuck on a FIFO is left behind, the test goes on.
    """
    import threading

    import pytest
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    outcome: dict[str, object] = {}

    def run() -> None:
        result = CliRunner().invoke(app, list(args))
        outcome["code"], outcome["stderr"] = result.exit_code, result.stderr

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline_s)
    if thread.is_alive():
        pytest.fail(f"`embedkit {' '.join(args)}` did not finish in {deadline_s} s: it hangs")
    return outcome["code"], outcome["stderr"]  # type: ignore[return-value]
