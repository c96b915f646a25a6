"""Embedding with an exported ONNX folder through ONNX Runtime (no torch anywhere on this path).

The folder is what `embedkit export` writes: `model.onnx` (+ `model_fp16.onnx`,
`model_int8.onnx`), tokenizer files and `embedkit.json`. Tokenization and length-sorted
batching are the same as TorchEncoder's (`embedkit.encode.batching`), so both backends see the same
token ids; pooling and (by default) L2 normalisation happen inside the graph.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import TokenBatcher, check_tokenizer_workers, tokenizer_workers_for
from embedkit.encode.devices import check_device
from embedkit.encode.identity import model_identity
from embedkit.encode.json_file import read_json
from embedkit.encode.model_folder import ModelSpec, read_model_spec, resolve_model_path
from embedkit.encode.ort_import import import_onnxruntime
from embedkit.encode.precisions import PRECISION_FILES, check_precision
from embedkit.encode.protocol import EncoderBase
from embedkit.encode.runtime import check_threads
from embedkit.encode.shapes import WARMUP_ROWS, ShapePlan, fixed_shapes_default
from embedkit.encode.stages import EncoderStages
from embedkit.encode.token_arrays import Batch
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.encode.cuda_run import BoundRunner

OUTPUT_NAME = "sentence_embedding"
log = logging.getLogger("embedkit.encode")


@dataclass(frozen=True)
class Warmup:
    """What a warm-up ran: every fixed shape of batches up to `rows` rows, once."""

    rows: int  # the largest batch warmed
    shapes: int
    seconds: float


def read_export_metadata(path: Path, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """`embedkit.json` of an exported folder (`meta`, when already read), checked; else an `InputError`."""
    meta_path = path / "embedkit.json"
    if not meta_path.is_file() or not (path / PRECISION_FILES["fp32"]).is_file():
        raise InputError(
            f"not an ONNX export: {path} needs model.onnx and embedkit.json (run `embedkit export`)"
        )
    meta = meta if meta else read_json(meta_path)
    for key in ("dim", "max_seq_length"):
        if not isinstance(meta.get(key), int):
            raise InputError(f"{meta_path} has no integer {key!r}: re-export the model")
    return meta


def precision_files(meta: dict[str, Any]) -> dict[str, str]:
    """{precision: file name} from `embedkit.json`; names must be plain files inside the folder."""
    files = meta.get("files") or PRECISION_FILES
    if not isinstance(files, dict):
        raise InputError("embedkit.json: 'files' must map precisions to file names")
    for name in files.values():
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise InputError(f"embedkit.json: {name!r} is not a file name inside the export folder")
    return {p: files[p] for p in PRECISION_FILES if p in files}


def available_precisions(path: Path, meta: dict[str, Any]) -> list[str]:
    return [p for p, name in precision_files(meta).items() if (path / name).is_file()]


def session_options(
    intra_op_threads: int | None = None, spinning: bool = True
) -> Any:  # onnxruntime.SessionOptions (onnxruntime ships no types)
    """Full graph optimization (fuses int8 MatMulInteger chains at load); threads as asked.

    `spinning=False`: the intra-op threads sleep between runs instead of busy-waiting, which a
    server of many small batches on shared cores wants (`embedkit.serve.engine`).
    """
    ort = import_onnxruntime()

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if check_threads(intra_op_threads) is not None:
        options.intra_op_num_threads = intra_op_threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only: CUDA fallbacks are checked below, not logged
    return options


def cuda_listed() -> bool:
    """Whether this onnxruntime build offers CUDA at all (a session may still fall back)."""
    ort = import_onnxruntime()

    return "CUDAExecutionProvider" in ort.get_available_providers()


def preload_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries of the `nvidia-*` pip packages, where they are installed.

    onnxruntime-gpu finds them by itself only when torch was imported first or they are on the
    loader's path; this runtime path imports no torch, so without this a correct
    `pip install onnxruntime-gpu[cuda,cudnn]` would fall back to CPU. Quiet: what it could not
    load shows up as the session's fallback, which `create_session` turns into a clear error.
    """
    import contextlib
    import io

    ort = import_onnxruntime()

    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu >= 1.21; older builds lack it
    if preload is None:
        return
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        preload()


def create_session(
    file: Path,
    device: str = "auto",
    intra_op_threads: int | None = None,
    spinning: bool = True,
    cuda_options: dict[str, str] | None = None,
) -> tuple[Any, str]:  # an onnxruntime.InferenceSession (untyped), "cuda" or "cpu"
    """An InferenceSession on `device`, and "cuda" or "cpu" for where it really runs.

    onnxruntime-gpu silently falls back to CPU when the CUDA libraries are missing, so the
    created session's own providers decide, not the list of available ones. `cuda_options`: the
    CUDA provider's options (`embedkit.encode.cuda_run.cuda_provider_options`).
    """
    ort = import_onnxruntime()

    check_device(device)
    want_cuda = device != "cpu" and cuda_listed()
    if device.startswith("cuda") and not want_cuda:
        raise InputError(
            "CUDA was requested but ONNX Runtime cannot use it: this onnxruntime build has no "
            "CUDAExecutionProvider (install embedkit[gpu], or use --device cpu)"
        )
    providers: list[Any] = ["CPUExecutionProvider"]
    if want_cuda:
        device_id = int(device.split(":", 1)[1]) if ":" in device else 0
        provider_options: dict[str, Any] = cuda_options or {"device_id": device_id}
        providers.insert(0, ("CUDAExecutionProvider", provider_options))
        preload_cuda_libraries()
        # onnxruntime-gpu 1.31 warns on every CUDA session that no plugin EP is registered, then
        # uses its built-in CUDA provider; where the session really runs is checked below.
        ort.set_default_logger_severity(3)
    try:
        session = ort.InferenceSession(
            str(file), sess_options=session_options(intra_op_threads, spinning), providers=providers
        )
    except InputError:
        raise
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
        raise InputError(f"cannot load {file}: {str(exc).splitlines()[0]}") from None
    on_cuda = "CUDAExecutionProvider" in session.get_providers()
    if device.startswith("cuda") and not on_cuda:
        raise InputError(
            "CUDA was requested but ONNX Runtime cannot use it: the session fell back to CPU "
            "(CUDA or cuDNN libraries missing or not matching this onnxruntime-gpu)"
        )
    if want_cuda and not on_cuda:
        warnings.warn(
            "onnxruntime-gpu could not load CUDA (libraries missing or not matching it): running on CPU; "
            "pass device='cpu' to silence this, or device='cuda' to make it an error",
            RuntimeWarning,
            stacklevel=2,
        )
    return session, ("cuda" if on_cuda else "cpu")


def graph_int_type(session: Any) -> Any:
    """int32 where every integer input of the graph is int32, else int64 (what exports take)."""
    types = {i.type for i in session.get_inputs()}
    return np.int32 if types == {"tensor(int32)"} else np.int64


class OnnxEncoder(EncoderBase):
    """Encode texts with an exported ONNX folder; same interface as TorchEncoder.

    `intra_op_threads` and `spinning` set the ONNX Runtime session (see `session_options`).
    `fixed_shapes` pads every batch to a bucket of `embedkit.encode.shapes` and `warmup` runs
    those buckets once at load (batches up to `warmup_rows`, and again up to a larger batch size
    when `encode` is given one); both None: on where the session runs on CUDA, off on the CPU.
    `tokenizer_workers`: threads that tokenize ahead of the model (None: by device,
    `tokenizer_workers_for`). `cuda_graphs`: None or True captures a CUDA graph per shape where
    the provider can (`embedkit.encode.cuda_run`); False: IO binding alone. The encoder's stages
    (`stages`, `embedkit.encode.stages`) are what the server and `encode` call.
    """

    backend = "onnx"

    def __init__(
        self,
        path: str | Path | ModelSpec,
        device: str = "auto",
        precision: str | None = None,
        intra_op_threads: int | None = None,
        spinning: bool = True,
        fixed_shapes: bool | None = None,
        warmup: bool | None = None,
        *,
        tokenizer_workers: int | None = None,
        cuda_graphs: bool | None = None,
        warmup_rows: int = WARMUP_ROWS,
    ) -> None:
        spec = path if isinstance(path, ModelSpec) and path.kind == "onnx" else None
        self.path = path.path if isinstance(path, ModelSpec) else resolve_model_path(path)
        self.metadata = read_export_metadata(self.path, spec.metadata if spec else None)
        available = available_precisions(self.path, self.metadata)
        check_precision(precision)
        check_tokenizer_workers(tokenizer_workers)
        if precision is not None and precision not in available:
            has = ", ".join(available)
            raise InputError(
                f"{self.path} has no {precision} model (has {has}): export it with --{precision}"
            )
        files = precision_files(self.metadata)
        chosen = precision
        if chosen is None:
            # fp16 is the GPU default (tensor cores, half the memory traffic; parity-gated at export);
            # int8 is never a default: it trades accuracy for CPU speed, the user's call.
            gpu_possible = device != "cpu" and cuda_listed()
            chosen = "fp16" if gpu_possible and "fp16" in available else "fp32"
        file = self.path / files[chosen]
        self.session, self.device = create_session(file, device, intra_op_threads, spinning)
        if precision is None and chosen == "fp16" and self.device == "cpu":
            chosen = "fp32"  # CUDA was listed but the session fell back: fp32 is the CPU default
            self.session, self.device = create_session(
                self.path / files[chosen], "cpu", intra_op_threads, spinning
            )
        self.precision = chosen
        self._check_graph(self.path / files[chosen])
        self.max_seq_length = int(self.metadata["max_seq_length"])
        self.normalize_default = bool(self.metadata.get("normalize", True))
        self.pooling = str(self.metadata.get("pooling", "mean"))
        self.batcher = TokenBatcher(self.path, self.max_seq_length)
        # at the precision chosen: int8 vectors are another model's (`embedkit.encode.identity`)
        self.identity = model_identity(spec or read_model_spec(self.path), self.precision)
        self.fingerprint = self.identity.fingerprint
        on_cuda = fixed_shapes_default(self.device)
        self.shapes = ShapePlan(self.max_seq_length, on_cuda if fixed_shapes is None else fixed_shapes)
        device_id = int(device.split(":", 1)[1]) if device.startswith("cuda:") else 0
        session_args = (self.path / files[chosen], intra_op_threads, spinning)
        self.runner = open_runner(self, device_id, session_args, cuda_graphs)
        workers = tokenizer_workers_for(self.device) if tokenizer_workers is None else tokenizer_workers
        self.stages = EncoderStages(
            self.batcher,
            self.run_batch,
            self.dim,
            shapes=self.shapes,
            dtype=graph_int_type(self.session),
            type_ids="token_type_ids" in self.input_names,
            workers=workers,
            warm=self.warm_up,
        )
        self.warmup: Warmup | None = None
        self.warms = (on_cuda if warmup is None else warmup) and self.shapes.fixed
        if self.warms:
            self.warm_up(warmup_rows)

    def _check_graph(self, file: Path) -> None:
        """The graph's inputs, and its output against `embedkit.json`'s dim."""
        self.input_names = {i.name for i in self.session.get_inputs()}
        if OUTPUT_NAME not in {o.name for o in self.session.get_outputs()}:
            raise InputError(f"{file} has no {OUTPUT_NAME!r} output: re-export the model")
        self.dim = int(self.metadata["dim"])
        (output,) = [o for o in self.session.get_outputs() if o.name == OUTPUT_NAME]
        graph_dim = output.shape[-1] if output.shape else None
        if isinstance(graph_dim, int) and graph_dim != self.dim:
            raise InputError(
                f"{self.path / 'embedkit.json'} says dim {self.dim}, but the graph outputs {graph_dim}-d "
                "vectors: the folder is damaged (re-export the model)"
            )

    @property
    def truncated(self) -> int:
        return self.batcher.truncated

    def run_batch(self, batch: Batch) -> np.ndarray:
        """Sentence vectors (float32 [n, dim]) of one padded batch's real rows, as the graph computes
        them: through the CUDA runner's bound buffers, or NumPy feeds on the CPU."""
        if self.runner is not None:
            return self.runner.run(batch)[: batch.real_rows]
        feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if "token_type_ids" in self.input_names:
            types = batch.token_type_ids
            feeds["token_type_ids"] = types if types is not None else np.zeros_like(batch.input_ids)
        vectors: np.ndarray  # the session's one output (onnxruntime ships no types)
        (vectors,) = self.session.run([OUTPUT_NAME], feeds)
        return vectors[: batch.real_rows].astype(np.float32, copy=False)

    def warm_up(self, rows: int, max_tokens: int | None = None) -> Warmup:
        """Run every fixed shape of batches up to `rows` rows (of at most `max_tokens` padded
        tokens) once, largest first, so that ONNX Runtime meets none of them for the first time
        on real texts (and a CUDA graph is captured for each); timed and logged. Nothing to run
        without fixed shapes."""
        start = time.perf_counter()
        shapes = self.shapes.shapes(rows, max_tokens)
        pad, dtype = self.batcher.pad_id, self.stages.dtype
        for height, width in shapes:
            filled = np.ones((height, width), dtype=dtype)
            types = filled * 0 if self.stages.type_ids else None
            self.run_batch(Batch(np.arange(height), filled * pad, filled, types))
        self.warmup = Warmup(rows, len(shapes), time.perf_counter() - start)
        log.info(
            "warm-up: %d shapes (batches up to %d rows) on %s in %.2f s",
            len(shapes), rows, self.device, self.warmup.seconds,
        )
        return self.warmup

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        """`normalize=None` keeps the graph's own output; True L2-normalises an un-normalised graph's
        vectors here. A graph that normalises inside cannot give raw vectors back. A batch size
        larger than the warm-up's is warmed first (its shapes would be new to the session).
        """
        if normalize is False and self.normalize_default:
            raise InputError(
                f"{self.path} L2-normalises inside the graph; export with --no-normalize for raw vectors"
            )
        if self.warms and self.warmup is not None and batch_size > self.warmup.rows:
            self.warm_up(batch_size)
        extra_norm = bool(normalize) and not self.normalize_default
        description = f"embedding ({self.precision})"
        return self.stages.encode(
            texts, batch_size, normalize=extra_norm, progress=progress, description=description
        )


def open_runner(
    encoder: OnnxEncoder,
    device_id: int,
    session_args: tuple[Path, int | None, bool],  # the model file, intra-op threads, spinning
    cuda_graphs: bool | None,
) -> BoundRunner | None:
    """The CUDA run path of `encoder` (`embedkit.encode.cuda_run`), or None on the CPU. With CUDA
    graphs, the session is made again with them on; where that fails, one line says so."""
    from embedkit.encode.cuda_run import BoundRunner, DeviceRun, choose_device_run, cuda_provider_options

    ort = import_onnxruntime()
    plan = choose_device_run(encoder.device, encoder.shapes.fixed, cuda_graphs, ort.__version__)
    if plan.feeds == "numpy":
        return None
    file, threads, spinning = session_args

    def reopen(graphs: bool) -> Any:
        options = cuda_provider_options(device_id, DeviceRun(plan.feeds, graphs, plan.reason))
        return create_session(file, f"cuda:{device_id}", threads, spinning, options)[0]

    if plan.cuda_graphs:
        try:
            encoder.session = reopen(True)
        except InputError as exc:
            reason = " ".join(str(exc).split())[:160]
            print(f"CUDA graphs: not available here ({reason}); running with IO binding", file=sys.stderr)
            plan = DeviceRun("io_binding", False, reason)
    times = encoder.batcher.times
    return BoundRunner(encoder.session, device_id, OUTPUT_NAME, plan, times, reopen, encoder.dim)
