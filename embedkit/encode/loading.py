"""One way to open any model folder for embedding: `load_encoder`.

An exported ONNX folder is run with ONNX Runtime (`embedkit.encode.onnx_backend.OnnxEncoder`), a trained or
Hugging Face folder with torch (`embedkit.encode.torch_backend.TorchEncoder`). Both are imported only
when their kind of folder is opened, so serving an ONNX model never imports torch.
"""

from __future__ import annotations

from pathlib import Path

from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.encode.protocol import Encoder, StagedEncoder
from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError


def load_encoder(
    path: str | Path | ModelSpec | None = None,
    device: str | None = None,
    precision: str | None = None,
    intra_op_threads: int | None = None,
    spinning: bool | None = None,
    warmup: bool | None = None,
    tokenizer_workers: int | None = None,
    cuda_graphs: bool | None = None,
    *,
    runtime: Runtime | None = None,
) -> StagedEncoder:
    """Open a model folder for embedding, whatever its kind, where `runtime` says it runs.

    `path`: an ONNX export (`embedkit export`), a trained or Hugging Face folder, or None for the
    bundled all-MiniLM-L6-v2. `runtime` (`embedkit.encode.runtime.Runtime`, its defaults said
    there): the device ("auto": CUDA when the backend can really run on it, else CPU; "cuda"
    that is not usable is an `InputError`, never a silent CPU run), the ONNX precision (a torch
    folder runs in fp32 only), ONNX Runtime's threads and spinning, the warm-up, the tokenizer
    workers and CUDA graphs. The older keywords (`device=`, `precision=`, `intra_op_threads=`
    for `threads`, ...) still build one; giving both is an `InputError`. The bundled model runs
    as its ONNX form, exported once on first use (`embedkit.encode.default_onnx`); torch follows
    its own thread setting (`OMP_NUM_THREADS`, which Ray sets for its workers).

    >>> encoder = load_encoder("runs/my-model-onnx", runtime=Runtime(device="cpu"))  # doctest: +SKIP
    >>> encoder.encode(["a sentence", "another"]).shape  # doctest: +SKIP
    (2, 384)
    """
    runtime = runtime_of(
        runtime,
        device=device,
        precision=precision,
        threads=intra_op_threads,
        spinning=spinning,
        warmup=warmup,
        tokenizer_workers=tokenizer_workers,
        cuda_graphs=cuda_graphs,
    )
    return _load(path, runtime)


def _load(path: str | Path | ModelSpec | None, runtime: Runtime) -> StagedEncoder:
    precision = runtime.precision
    spec = read_model_spec(path)
    if spec.kind == "torch" and precision in (None, "fp32"):
        from embedkit.encode.default_onnx import default_onnx_spec

        spec = default_onnx_spec(spec) or spec  # the bundled model runs without torch
    if spec.kind == "onnx":
        from embedkit.encode.onnx_backend import OnnxEncoder

        return OnnxEncoder(
            spec,
            device=runtime.device,
            precision=precision,
            intra_op_threads=runtime.threads,
            spinning=runtime.spinning,
            warmup=runtime.warmup,
            tokenizer_workers=runtime.tokenizer_workers,
            cuda_graphs=runtime.cuda_graphs,
        )
    if precision not in (None, "fp32"):
        raise InputError(
            f"precision {precision} needs an ONNX export; {spec.path} is a torch folder "
            "(export it with `embedkit export`)"
        )
    from embedkit.encode.torch_backend import TorchEncoder

    return TorchEncoder(spec, device=runtime.device, tokenizer_workers=runtime.tokenizer_workers)


def device_name(encoder: Encoder) -> str:
    """The device as users write it ("cpu", "cuda:0"), for reports and CLI output."""
    return str(encoder.device)
