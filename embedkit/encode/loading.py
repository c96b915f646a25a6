"""One way to open any model folder for embedding: `load_encoder`.

An exported ONNX folder is run with ONNX Runtime (`embedkit.encode.onnx_backend.OnnxEncoder`), a trained or
Hugging Face folder with torch (`embedkit.encode.torch_backend.TorchEncoder`). Both are imported only
when their kind of folder is opened, so serving an ONNX model never imports torch.
"""

from __future__ import annotations

from pathlib import Path

from embedkit.encode.devices import check_device
from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.encode.precisions import check_precision
from embedkit.encode.protocol import Encoder, StagedEncoder
from embedkit.errors import InputError


def check_encoding_options(device: str, precision: str | None) -> str:
    """The device and precision names checked, before a command creates any output; the device."""
    device = check_device(device)
    check_precision(precision)
    return device


def load_encoder(
    path: str | Path | ModelSpec | None = None,
    device: str = "auto",
    precision: str | None = None,
    intra_op_threads: int | None = None,
    spinning: bool = True,
    warmup: bool | None = None,
    tokenizer_workers: int | None = None,
    cuda_graphs: bool | None = None,
) -> StagedEncoder:
    """Open a model folder for embedding, whatever its kind.

    `path`: an ONNX export (`embedkit export`), a trained or Hugging Face folder, or None for the
    bundled all-MiniLM-L6-v2. `device`: "auto" (CUDA when the backend can really run on it, else
    CPU), "cpu", or "cuda"/"cuda:N" (an `InputError` when CUDA is not usable, never a silent CPU run).
    `precision`: for ONNX folders, one of fp32, fp16, int8 (None: the export's default); a torch
    folder runs in fp32 only. The bundled model runs as its ONNX form, exported once on first use
    (`embedkit.encode.default_onnx`). `intra_op_threads`: ONNX Runtime's threads per session (None:
    one per core), so that several encoders on one machine do not oversubscribe it; torch follows
    its own setting (`OMP_NUM_THREADS`, which Ray sets for its workers). `spinning=False`: ONNX
Runtime's CPU threads sleep between runs (a server's setting; see `session_options`).
    `warmup`: run the fixed shapes of an ONNX session once at load (None: on CUDA only; see
    `embedkit.encode.shapes`). `tokenizer_workers`: threads that tokenize and pad ahead of the
    model (None: by device, `embedkit.encode.batching.tokenizer_workers_for`; 0: none).
    `cuda_graphs`: False runs an ONNX model on CUDA with IO binding alone, without capturing a
    CUDA graph per shape (`embedkit.encode.cuda_run`).

    >>> encoder = load_encoder("runs/my-model-onnx")  # doctest: +SKIP
    >>> encoder.encode(["a sentence", "another"]).shape  # doctest: +SKIP
    (2, 384)
    """
    device = check_encoding_options(device, precision)
    spec = read_model_spec(path)
    if spec.kind == "torch" and precision in (None, "fp32"):
        from embedkit.encode.default_onnx import default_onnx_spec

        spec = default_onnx_spec(spec) or spec  # the bundled model runs without torch
    if spec.kind == "onnx":
        from embedkit.encode.onnx_backend import OnnxEncoder

        return OnnxEncoder(
            spec,
            device=device,
            precision=precision,
            intra_op_threads=intra_op_threads,
            spinning=spinning,
            warmup=warmup,
            tokenizer_workers=tokenizer_workers,
            cuda_graphs=cuda_graphs,
        )
    if precision not in (None, "fp32"):
        raise InputError(
            f"precision {precision} needs an ONNX export; {spec.path} is a torch folder "
            "(export it with `embedkit export`)"
        )
    from embedkit.encode.torch_backend import TorchEncoder

    return TorchEncoder(spec, device=device, tokenizer_workers=tokenizer_workers)


def device_name(encoder: Encoder) -> str:
    """The device as users write it ("cpu", "cuda:0"), for reports and CLI output."""
    return str(encoder.device)
