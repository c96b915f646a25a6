"""A separate writer process for the concurrency and kill tests: `python writer_worker.py JSON`.

JSON: {"op": "append" | "build" | "append-loop" | "embed", "model": tiny model folder, "out": target,
"prefix": id prefix, "n": documents, "dim": dim, "seed": vector seed, "wait": bool,
"sleep": seconds per encode call, "started": a file to create once the write lock is held,
"stop": a file whose appearance ends "append-loop"}. Exit 0 on success, 2 on an InputError.
EMBEDKIT_FAULT_AT in the environment kills the process at that step (`embedkit.storage.atomic.fault_point`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runtime_helpers import TableEncoder, write_jsonl  # noqa: E402

from embedkit.errors import InputError  # noqa: E402
from embedkit.jobs.index_build import build_index  # noqa: E402
from embedkit.jobs.index_options import IndexOptions  # noqa: E402
from embedkit.jobs.streaming import CorpusOptions, embed_to_file  # noqa: E402
from embedkit.storage.locking import wait_for_locks  # noqa: E402


class SlowEncoder(TableEncoder):
    def __init__(self, model_dir, table, sleep, started):
        super().__init__(model_dir, table)
        self.sleep, self.started = sleep, started

    def encode(self, texts, batch_size=64, normalize=None):
        if self.started:
            Path(self.started).touch()  # the lock is held: encoding happens inside the write
        time.sleep(self.sleep)
        return super().encode(texts, batch_size, normalize)


def corpus(job, folder: Path, prefix: str):
    rng = np.random.default_rng(job.get("seed", 0))
    vectors = rng.standard_normal((job["n"], job.get("dim", 32)))
    ids = [f"{prefix}{i}" for i in range(job["n"])]
    texts = [f"text of {i}" for i in ids]
    path = write_jsonl(folder / f"{prefix}.jsonl", ids, texts)
    encoder = SlowEncoder(Path(job["model"]), dict(zip(texts, vectors, strict=True)),
                          job.get("sleep", 0.0), job.get("started"))
    return path, encoder


def main() -> int:
    job = json.loads(sys.argv[1])
    out = Path(job["out"])
    scratch = Path(job.get("scratch", out.parent))
    options = CorpusOptions(chunk_size=job.get("chunk", 10_000))
    try:
        with wait_for_locks(job.get("wait", False)):
            if job["op"] in ("append", "build"):
                path, encoder = corpus(job, scratch, job["prefix"])
                build_index(path, out, encoder, IndexOptions(append=job["op"] == "append", corpus=options))
            elif job["op"] == "embed":
                path, encoder = corpus(job, scratch, job["prefix"])
                embed_to_file(path, out, encoder, options=options)
            elif job["op"] == "append-loop":
                round_ = 0
                while not Path(job["stop"]).exists():
                    path, encoder = corpus({**job, "seed": round_}, scratch, f"{job['prefix']}{round_}-")
                    build_index(path, out, encoder, IndexOptions(append=True, corpus=options))
                    round_ += 1
                print(round_)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
