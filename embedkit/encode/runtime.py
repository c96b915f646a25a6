"""`Runtime`: where a model and faiss run (device, precision, threads), checked once, handed down whole.

Every entry point builds one from its options (the CLI: `embedkit.cli.options.runtime_from_options`)
and hands it on: `load_encoder(path, runtime=...)`, `SearchIndex.load(path, runtime=...)`,
`IndexOptions(runtime=...)`, `ServeConfig(runtime=...)`. The questions that follow from it (does
faiss run on a GPU, which one) are answered here, so no caller reads a device name itself.

Defaults and where they come from:
- `device` "auto": the model on CUDA where its backend can really run there, else the CPU (a
  `cuda` that cannot be had is an `InputError`, never a silent CPU run: `embedkit.encode.devices`).
  faiss runs on a GPU only for `cuda`/`cuda:N`: with `auto` an index's kind must not depend on
  which faiss package is installed (`embedkit.index.faiss_gpu`).
- `precision` None: the export's default, fp16 on CUDA where it was exported, else fp32
  (`embedkit.encode.onnx_backend`); a torch folder runs in fp32 only.
- `threads` None: ONNX Runtime's intra-op threads, one per core; fewer lets several encoders share a
  machine (Ray gives each worker its CPUs: `embedkit.jobs.distributed`). torch follows its own
  setting (`OMP_NUM_THREADS`).
- `spinning` True: ONNX Runtime's threads busy-wait between runs (its own default); the server turns
  it off (`embedkit.serve.settings`: many small batches on shared cores).
- `warmup` None: the fixed shapes run once at load on CUDA only (`embedkit.encode.shapes`).
- `tokenizer_workers` None: by device (`embedkit.encode.batching.tokenizer_workers_for`).
- `cuda_graphs` None: a CUDA graph per batch shape where the provider can (`embedkit.encode.cuda_run`);
  False: IO binding alone.

The older switch `gpu` (`--gpu`: faiss on GPU 0) is `device="cuda"` now (`fold_gpu`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

from embedkit.encode.batching import check_tokenizer_workers
from embedkit.encode.devices import check_device
from embedkit.encode.precisions import check_precision
from embedkit.errors import InputError

GPU_DEPRECATION = "--gpu is deprecated: use --device cuda"


def check_threads(threads: int | None) -> int | None:
    """ONNX Runtime's intra-op threads: None (its default) or 0 (all cores) or more."""
    if threads is not None and (isinstance(threads, bool) or threads < 0):
        raise InputError(f"threads must be 0 (all cores) or more, got {threads}")
    return threads


@dataclass(frozen=True)
class Runtime:
    """Where things run; every value is checked on creation (an `InputError`). Defaults: above."""

    device: str = "auto"  # auto, cpu, cuda or cuda:N
    precision: str | None = None  # fp32, fp16 or int8 of an ONNX export; None: the export's default
    threads: int | None = None  # ONNX Runtime's intra-op threads; None: one per core
    spinning: bool = True  # ONNX Runtime's threads busy-wait between runs
    warmup: bool | None = None  # run the fixed shapes at load; None: on CUDA only
    tokenizer_workers: int | None = None  # threads tokenizing ahead of the model; None: by device
    cuda_graphs: bool | None = None  # False: CUDA with IO binding alone; None: graphs where possible

    def __post_init__(self) -> None:
        check_device(self.device)
        check_precision(self.precision)
        check_threads(self.threads)
        check_tokenizer_workers(self.tokenizer_workers)

    @property
    def faiss_gpu(self) -> int | None:
        """The GPU faiss runs on (`cuda` is GPU 0), or None: faiss on the CPU (`auto` and `cpu`)."""
        if not self.device.startswith("cuda"):
            return None
        return int(self.device[5:] or 0)

    @property
    def faiss_device(self) -> str:
        """Where faiss runs, as reports name it: cpu or cuda:N."""
        return "cpu" if self.faiss_gpu is None else f"cuda:{self.faiss_gpu}"


def fold_gpu(device: str, gpu: bool) -> str:
    """The device the older `gpu` switch asks for: cuda (faiss and the model on GPU 0) where
    `device` is auto; a `cuda:N` given stays; with `cpu` it is an `InputError`."""
    device = check_device(device)
    if not gpu or device.startswith("cuda"):
        return device
    if device == "cpu":
        raise InputError("--gpu runs on the GPU and --device cpu on the CPU: give one (--device cuda)")
    return "cuda"


def runtime_of(runtime: Runtime | None, gpu: bool = False, **legacy: object) -> Runtime:
    """The `Runtime` of a public function that still takes the older keywords one by one
    (`device=`, `precision=`, ... None: not given, `gpu=True`: deprecated): `runtime` or one built
    from them, never both (an `InputError`)."""
    given = {name: value for name, value in legacy.items() if value is not None}
    unknown = set(given) - {f.name for f in fields(Runtime)}
    if unknown:
        raise TypeError(f"unknown run-time settings: {', '.join(sorted(unknown))}")
    if runtime is not None and (given or gpu):
        named = ", ".join(f"{name}=" for name in (*given, *(["gpu"] if gpu else [])))
        raise InputError(f"give runtime= or {named}, not both (a Runtime holds them all)")
    if gpu:
        warnings.warn("gpu=True is deprecated: use Runtime(device='cuda')", DeprecationWarning, stacklevel=3)
        given["device"] = fold_gpu(str(given.get("device", "auto")), gpu)
    return runtime if runtime is not None else Runtime(**given)  # type: ignore[arg-type]
