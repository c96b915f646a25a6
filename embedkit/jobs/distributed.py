"""Embedding a corpus on a Ray cluster into part files (`embedkit embed --ray`).

The job is the one `embed --shard` runs, spread over an actor pool with Ray Data: the driver counts
the corpus once, cuts it into one contiguous shard per worker (`embedkit.jobs.parts`), and maps a
dataset of shard numbers through a class-based UDF. Each actor opens the encoder once (one GPU per
actor when the device is CUDA, else `cpus_per_worker` CPUs and as many ONNX Runtime threads) and
writes whole parts with `embed_shard`, reading its own range from the corpus file. No text or
vector passes through Ray's object store, and the parts are, by construction, the files
`embed --shard I/N` writes: concatenated in shard order they are the single-process `embed` output.

One part per worker: each worker reads the corpus once up to its range; more parts would balance
uneven workers better but read the corpus's start more often. On a cluster of several machines the
corpus, the model folder and `--out` must be at the same path on every node (a shared file
system), as Ray's workers open them there. A failed part is retried by Ray and rewritten
atomically. Ray is the optional extra `distributed`, imported only here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import EmbedkitError, InputError, RunFailure
from embedkit.extras import missing_extra_message
from embedkit.jobs.parts import Shard
from embedkit.jobs.run_report import EmbedRun
from embedkit.jobs.streaming import CorpusOptions, count_documents

RAY_MISSING = missing_extra_message("distributed", "embed --ray", ["ray[data]"])


def import_ray():  # -> the ray module, with ray.data loaded
    try:
        import ray
        import ray.data  # noqa: F401 (Ray Data is a separate extra of Ray)
    except ImportError:
        raise InputError(RAY_MISSING) from None
    return ray


@dataclass(frozen=True)
class RayEmbedReport(EmbedRun):
    """What `embed_with_ray` wrote; `seconds` is the Ray job's wall time, actors' start included,
    and `device` is "cuda" or "cpu", where the actors ran."""

    folder: Path
    parts: int
    workers: int


class PartWorker:
    """Ray Data's class-based UDF: one encoder per actor; each call embeds the shards it is given."""

    def __init__(self, job: dict[str, Any]) -> None:
        from embedkit.encode.loading import load_encoder

        self.job = job
        self.options = CorpusOptions(**job["options"])
        self.encoder = load_encoder(job["model"], runtime=Runtime(**job["runtime"]))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from embedkit.jobs.sharding import embed_shard

        reports = [
            embed_shard(
                self.job["corpus"],
                self.job["folder"],
                Shard(int(index), self.job["parts"]),
                self.encoder,
                options=self.options,
                normalize=self.job["normalize"],
                total=self.job["total"],
            )
            for index in batch["shard"]
        ]
        return {
            "shard": np.array([r.shard.index for r in reports]),
            "count": np.array([r.count for r in reports]),
            "dim": np.array([r.dim for r in reports]),
            "truncated": np.array([r.truncated for r in reports]),
            "device": np.array([r.device for r in reports]),
        }


def embed_with_ray(
    corpus: str | Path,
    folder: str | Path,
    model: str | Path | None = None,
    *,
    options: CorpusOptions | None = None,
    normalize: bool | None = None,
    runtime: Runtime | None = None,
    device: str | None = None,  # with `precision`: the older spelling of `runtime`
    precision: str | None = None,
    address: str | None = None,
    num_workers: int | None = None,
    cpus_per_worker: int = 1,
    progress: bool = False,
) -> RayEmbedReport:
    """Embed `corpus` into part files in `folder` with a pool of Ray actors.

    `address`: the cluster to join ("auto": the one this machine belongs to; None: a running Ray in
    this process, else `RAY_ADDRESS`, else a new local one). `runtime`'s device: "cuda" gives each
    actor one GPU; "auto" does so when the cluster has GPUs; "cpu" runs CPU actors of
    `cpus_per_worker` CPUs, each with as many ONNX Runtime threads. `num_workers` (default: one
    per GPU, or the cluster's CPUs / `cpus_per_worker`) is also the number of parts, capped at the
    number of documents. `device=`, `precision=`: the older spelling of `runtime`.
    """
    from embedkit.encode.default_onnx import default_onnx_spec
    from embedkit.encode.model_folder import read_model_spec
    from embedkit.jobs.sharding import check_part_folder

    ray = import_ray()
    folder = check_part_folder(folder).absolute()
    runtime = runtime_of(runtime, device=device, precision=precision)
    if runtime.device.startswith("cuda:"):
        raise InputError(
            f"--device {runtime.device} with --ray: use --device cuda (Ray gives each worker its GPU)"
        )
    if num_workers is not None and num_workers < 1:
        raise InputError(f"--num-workers must be at least 1, got {num_workers}")
    if cpus_per_worker < 1:
        raise InputError(f"--cpus-per-worker must be at least 1, got {cpus_per_worker}")
    options = options or CorpusOptions()
    total = count_documents(corpus, options)
    # The driver resolves the model once, so that workers open one folder and none of them races to
    # export the bundled model to ONNX (the first open of it does that).
    spec = read_model_spec(model)
    if spec.kind == "torch" and runtime.precision in (None, "fp32"):
        spec = default_onnx_spec(spec) or spec
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        return _run(
            ray,
            corpus,
            folder,
            spec.path,
            options,
            normalize,
            runtime,
            num_workers,
            cpus_per_worker,
            total,
            progress,
        )
    finally:
        if started_here:
            ray.shutdown()


def worker_runtime(runtime: Runtime, use_gpu: bool, cpus_per_worker: int) -> Runtime:
    """Each worker's `Runtime`: its own GPU, or the CPU with its CPUs as ONNX Runtime's threads
    (unless `runtime` names a thread count)."""
    threads = cpus_per_worker if runtime.threads is None else runtime.threads
    return replace(runtime, device="cuda" if use_gpu else "cpu", threads=threads)


def _run(
    ray,
    corpus,
    folder: Path,
    model: Path,
    options: CorpusOptions,
    normalize: bool | None,
    runtime: Runtime,
    num_workers: int | None,
    cpus_per_worker: int,
    total: int,
    progress: bool,
) -> RayEmbedReport:
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    use_gpu = runtime.device == "cuda" or (runtime.device == "auto" and gpus >= 1)
    if use_gpu and gpus < 1:
        raise InputError("--device cuda with --ray, but the Ray cluster has no GPU")
    workers = num_workers or (gpus if use_gpu else max(1, cpus // cpus_per_worker))
    parts = max(1, min(workers, total))
    workers = min(workers, parts)
    job = {
        "corpus": str(Path(corpus).absolute()),
        "folder": str(folder),
        "model": str(model),
        "options": asdict(options),
        "normalize": normalize,
        "runtime": asdict(worker_runtime(runtime, use_gpu, cpus_per_worker)),
        "parts": parts,
        "total": total,
    }
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = progress
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.CRITICAL)  # a failure is reported once, below
    # One shard per task and one task per actor at a time: a part is the unit of work and of retry.
    pool = ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1)
    shards = ray.data.from_items([{"shard": i} for i in range(parts)], override_num_blocks=parts)
    began = time.perf_counter()
    try:
        rows = shards.map_batches(
            PartWorker,
            fn_constructor_kwargs={"job": job},
            batch_size=1,
            batch_format="numpy",
            compute=pool,
            num_cpus=cpus_per_worker,
            num_gpus=1 if use_gpu else 0,
        ).take_all()
    except Exception as exc:  # Ray wraps a worker's error in its own exception types
        raise _worker_error(exc) from None
    seconds = time.perf_counter() - began
    if sorted(int(row["shard"]) for row in rows) != list(range(parts)):
        raise RunFailure(f"the Ray job returned parts {sorted(int(r['shard']) for r in rows)} of {parts}")
    return RayEmbedReport(
        folder=folder,
        parts=parts,
        workers=workers,
        count=sum(int(row["count"]) for row in rows),
        dim=int(rows[0]["dim"]),
        seconds=seconds,
        device=str(rows[0]["device"]),
        truncated=sum(int(row["truncated"]) for row in rows),
    )


def _worker_error(exc: BaseException) -> EmbedkitError:
    """The embedkit error a worker raised (bad input stays exit 2), else a one-line `RunFailure`."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        if isinstance(current, EmbedkitError):
            return current
        seen.append(current)
        # Ray's task errors (ray 2.x: RayTaskError) hold the worker's exception as `cause`; others do not
        current = getattr(current, "cause", None) or current.__cause__ or current.__context__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return RunFailure(f"the Ray job failed: {lines[-1] if lines else type(exc).__name__}")
