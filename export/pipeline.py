"""`export_model`: a torch model folder in, a verified ONNX folder out, or nothing at all.

Order of work: check every input first (cheap, exit 2 on a problem); trace the graph; fuse it;
write the tokenizer and metadata; then for each precision build the file and check its parity
with PyTorch on the built-in sentences (plus `--calibration`, plus `--dev-sts` Spearman). Everything
happens in a temporary folder beside the output that becomes the output only when every gate
has passed (`embedkit.storage.atomic.atomic_dir`): a failed gate or an interruption leaves nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from embedkit import __version__
from embedkit.encode.identity import TOKENIZER_FILES, export_record, model_fingerprint
from embedkit.encode.model_folder import (
    MATRYOSHKA_DIMS,
    ModelSpec,
    read_json,
    read_model_spec,
    resolve_model_path,
)
from embedkit.encode.onnx_backend import OnnxEncoder
from embedkit.encode.ort_import import import_onnxruntime
from embedkit.encode.precisions import PRECISION_FILES
from embedkit.encode.st_modules import read_st_modules
from embedkit.errors import InputError, RunFailure
from embedkit.export.parity import (
    ParityFailure,
    ParityGates,
    ParityReport,
    builtin_sentences,
    judge,
    read_calibration,
    row_cosines,
)
from embedkit.index.layout import check_not_in_index
from embedkit.storage.atomic import atomic_dir, scratch_dir, write_json_atomic
from embedkit.storage.locking import locked

# The tracer's opsets (14 to 20) export and run. Measured with onnxruntime 1.32: 14 to 17 fuse
# fully (6 Attention on MiniLM-L6); from 18 the optimizer fuses no Attention (only LayerNorm).
MIN_OPSET, MAX_OPSET = 14, 20
PARITY_BATCH_SIZE = 64  # the runtime default, so parity sees the padding shapes users will run


@dataclass
class ExportResult:
    """What `export_model` wrote: the folder, its files by precision, metadata and parity figures."""

    out_dir: Path
    files: dict[str, str]
    metadata: dict[str, Any]
    reports: list[ParityReport] = field(default_factory=list)


@dataclass
class _Checks:
    """The reference embeddings every precision is compared with, computed once."""

    texts: list[str]
    reference: np.ndarray  # (n, dim) PyTorch output, normalised as the graph is
    sts: Any = None  # embedkit.data.sts.StsData, when --dev-sts was given
    torch_sts: float | None = None
    fp32_sts: float | None = None


@locked("out_dir")  # one writer per export folder, as for indexes and training runs
def export_model(
    model_dir: str | Path | None,
    out_dir: str | Path,
    fp16: bool = False,
    int8: bool = False,
    opset: int = 17,
    optimize: bool = True,
    calibration: str | Path | None = None,
    dev_sts: str | Path | None = None,
    progress: bool = True,
    *,
    normalize: bool = True,
    token_embeddings: bool = False,
    device: str = "auto",
    gates: ParityGates | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ExportResult:
    """Export `model_dir` to a verified ONNX folder at `out_dir`; see the module docstring.

    `normalize`: L2-normalise inside the graph (default). `token_embeddings`: also output the
    token vectors. `device`: where the parity check runs both models (int8: always the CPU).
    `gates`: the parity thresholds (tests tighten them to force a failure). `on_step`: told each
    stage, for the CLI.
    Raises `InputError` for bad input, `ParityFailure` (a `RunFailure`) when a gate fails.
    """
    say = on_step or (lambda _message: None)
    gates = gates or ParityGates()
    source, spec, config = _check_source(model_dir)
    out = _check_output(out_dir, source)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise InputError(f"opset {opset} is not supported: use {MIN_OPSET} to {MAX_OPSET}")
    extra = read_calibration(calibration) if calibration is not None else []
    sts = _read_dev_sts(dev_sts) if dev_sts is not None else None

    # torch, transformers and onnxruntime are imported only here, after the inputs passed.
    from embedkit.export.onnx_graph import (
        check_architecture,
        export_graph,
        exporter_versions,
        load_eager_backbone,
    )
    from embedkit.export.optimize import optimize_graph
    from embedkit.export.reference import reference_encoder as make_reference

    check_architecture(config)
    reference_encoder = make_reference(source, device, spec.max_seq_length)
    reference_name = reference_encoder.name
    fingerprint = model_fingerprint(source)
    reports: list[ParityReport] = []
    import_onnxruntime()  # before any onnxruntime submodule: without its telemetry notice
    with scratch_dir("embedkit-export-") as work_name, atomic_dir(out) as stage:
        work = Path(work_name)
        say(f"tracing {source.name} (opset {opset})")
        raw = work / "raw.onnx"
        info = export_graph(
            load_eager_backbone(source),
            raw,
            modules=spec.modules or read_st_modules(source, 0),
            normalize=normalize,
            opset=opset,
            token_embeddings=token_embeddings,
        )
        fusion: dict[str, int] = {}
        if optimize:
            say("fusing the graph (onnxruntime.transformers.optimizer)")
            fusion = optimize_graph(
                raw,
                stage / PRECISION_FILES["fp32"],
                num_heads=info.num_attention_heads,
                hidden_size=info.hidden_size,
            )
            if not fusion.get("Attention"):
                say(f"warning: no Attention was fused at opset {opset} (opsets 14 to 17 fuse fully)")
        else:
            shutil.copyfile(raw, stage / PRECISION_FILES["fp32"])
        _copy_tokenizer(source, stage)
        shutil.copyfile(source / "config.json", stage / "config.json")
        metadata: dict[str, Any] = {
            "format": "embedkit-onnx",
            "embedkit_version": __version__,
            "fingerprint": fingerprint,
            # the source's parts of the identity, which the graph cannot show (`embedkit.encode.identity`)
            "identity": export_record(spec, stage),
            "source": str(source),
            "model_type": spec.model_type,
            "pooling": info.pooling,
            "normalize": info.normalize,
            "source_normalize": spec.normalize,
            "dim": info.dim,
            **({MATRYOSHKA_DIMS: list(spec.matryoshka_dims)} if spec.matryoshka_dims else {}),
            "max_seq_length": spec.max_seq_length,
            "input_names": list(info.input_names),
            "output_names": list(info.output_names),
            "num_attention_heads": info.num_attention_heads,
            "hidden_size": info.hidden_size,
            "opset": opset,
            "exporter": exporter_versions(),
            "optimized": optimize,
            "fusion": fusion,
            "precisions": ["fp32"],
            # Every name, so the parity check can open each file as it appears; narrowed below.
            "files": dict(PRECISION_FILES),
        }
        # The encoder reads this to run the parity check; it is rewritten with the figures below.
        write_json_atomic(stage / "embedkit.json", metadata)

        say(f"embedding the parity sentences with {reference_name}")
        texts = builtin_sentences(spec.max_seq_length) + extra
        checks = _Checks(texts, reference_encoder.encode(texts, PARITY_BATCH_SIZE, normalize, progress), sts)
        if sts is not None:
            checks.torch_sts = _sts_spearman(reference_encoder, sts, progress)
        del reference_encoder

        say("checking fp32 parity")
        reports.append(_check(stage, "fp32", checks, gates, device, progress, reports))
        if fp16:
            metadata["fp16"] = _build_fp16(stage, checks, gates, device, progress, reports, say)
        if int8:
            metadata["int8"] = _build_int8(stage, work, optimize, checks, gates, progress, reports, say)
        metadata["precisions"] = [p for p in PRECISION_FILES if (stage / PRECISION_FILES[p]).is_file()]
        metadata["files"] = {p: PRECISION_FILES[p] for p in metadata["precisions"]}
        metadata["parity"] = {
            "sentences": len(texts),
            "builtin_sentences": len(texts) - len(extra),
            "calibration_sentences": len(extra),
            "dev_sts": str(dev_sts) if dev_sts is not None else None,
            "reference": reference_name,
            "torch_sts_spearman": checks.torch_sts,
            "gates": asdict(gates),
            **{r.precision: r.as_json() for r in reports},
        }
        write_json_atomic(stage / "embedkit.json", metadata)
    return ExportResult(out, dict(metadata["files"]), metadata, reports)


# ----- checks on the inputs ------------------------------------------------------------------


def _check_source(model_dir: str | Path | None) -> tuple[Path, ModelSpec, dict[str, Any]]:
    source = resolve_model_path(model_dir).resolve()
    spec = read_model_spec(source)
    if spec.kind != "torch":
        raise InputError(f"{source} is already an ONNX export; export the torch model folder it came from")
    return source, spec, read_json(source / "config.json")


def _check_output(out_dir: str | Path, source: Path) -> Path:
    """The output folder, refused if writing it could destroy the model or someone's files."""
    check_not_in_index(out_dir)
    out = Path(out_dir).expanduser().resolve()
    if out == source or out in source.parents:
        raise InputError(f"--out {out} would replace the model folder itself; choose another folder")
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out} is a file, not a folder")
        if any(out.iterdir()) and not (out / "embedkit.json").is_file():
            raise InputError(
                f"--out {out} is a non-empty folder that is not an embedkit export; choose another"
            )
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"cannot write to {out}: {ancestor} is not writable")
    return out


def _read_dev_sts(path: str | Path):  # -> embedkit.data.sts.StsData
    from embedkit.data.input_files import check_input_file
    from embedkit.data.sts import read_sts

    return read_sts(check_input_file(path, "--dev-sts file"))


def _copy_tokenizer(source: Path, stage: Path) -> None:
    """Copy the tokenizer files; write tokenizer.json when the source has only slow-tokenizer files."""
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, stage / name)
    if not (stage / "tokenizer.json").is_file():
        # The runtime reads tokenizer.json with the `tokenizers` library alone, without transformers.
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(source)).backend_tokenizer.save(str(stage / "tokenizer.json"))


# ----- parity ---------------------------------------------------------------------------------


def _sts_spearman(encoder: Any, sts: Any, progress: bool) -> float:
    """Spearman x100 of cosine similarity against the gold scores, one correlation over all pairs."""
    from embedkit.evaluation.metrics import spearman

    first = encoder.encode(sts.sentences1, PARITY_BATCH_SIZE, normalize=True, progress=progress)
    second = encoder.encode(sts.sentences2, PARITY_BATCH_SIZE, normalize=True, progress=progress)
    return 100.0 * spearman(np.einsum("ij,ij->i", first, second), sts.scores)


def _check(
    stage: Path,
    precision: str,
    checks: _Checks,
    gates: ParityGates,
    device: str,
    progress: bool,
    reports: list[ParityReport],
    raise_on_failure: bool = True,
) -> ParityReport:
    """Embed the parity sentences with one ONNX file and judge it; raise `ParityFailure` if asked."""
    try:
        # Dynamic int8 is made for CPU inference (OnnxEncoder never picks it on a GPU), so it is
        # checked where it will run.
        where = "cpu" if precision == "int8" else device
        encoder = OnnxEncoder(stage, device=where, precision=precision)
        vectors = encoder.encode(checks.texts, PARITY_BATCH_SIZE, progress=progress)
    except InputError as exc:  # our own file failed to load or run: a failure, not bad input
        raise RunFailure(f"the {precision} graph does not run: {exc}") from None
    sts_value = _sts_spearman(encoder, checks.sts, progress) if checks.sts is not None else None
    report = judge(
        precision,
        row_cosines(vectors, checks.reference),
        checks.texts,
        gates,
        sts_spearman=sts_value,
        fp32_sts_spearman=checks.fp32_sts,
        torch_sts_spearman=checks.torch_sts,
    )
    if precision == "fp32":
        checks.fp32_sts = sts_value
    if not report.passed and raise_on_failure:
        raise ParityFailure(f"parity gate failed: {report.summary()}", [*reports, report])
    return report


def _build_fp16(
    stage: Path,
    checks: _Checks,
    gates: ParityGates,
    device: str,
    progress: bool,
    reports: list[ParityReport],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Write model_fp16.onnx with the first plan that passes the fp16 gate."""
    from embedkit.export.precision import FP16_PLANS, convert_fp16

    target = stage / PRECISION_FILES["fp16"]
    report, error = None, None
    for plan in FP16_PLANS:
        say(f"converting to fp16 ({plan.name}) and checking parity")
        try:
            kept = convert_fp16(stage / PRECISION_FILES["fp32"], target, plan)
            report = _check(stage, "fp16", checks, gates, device, progress, reports, raise_on_failure=False)
        except RunFailure as exc:  # e.g. a conversion this onnxruntime cannot load: try the next plan
            error = exc
            say(f"fp16 ({plan.name}): {exc}")
            continue
        if report.passed:
            reports.append(report)
            return {"plan": plan.name, "kept_fp32_nodes": kept}
    return _fail(target, report, error, reports)


def _build_int8(
    stage: Path,
    work: Path,
    optimized: bool,
    checks: _Checks,
    gates: ParityGates,
    progress: bool,
    reports: list[ParityReport],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Write model_int8.onnx with the first plan that passes the int8 gate (checked on CPU, its target)."""
    from embedkit.export.precision import INT8_PLANS, quantize_int8

    target = stage / PRECISION_FILES["int8"]
    prepared, source, shapes = _quantizable_graph(stage, work, optimized, say)
    report, error = None, None
    for plan in INT8_PLANS:
        say(f"quantizing to int8 ({plan.name}) and checking parity")
        try:
            excluded = quantize_int8(prepared, target, plan)
            report = _check(stage, "int8", checks, gates, "cpu", progress, reports, raise_on_failure=False)
        except RunFailure as exc:
            error = exc
            say(f"int8 ({plan.name}): {exc}")
            continue
        if report.passed:
            reports.append(report)
            return {
                "plan": plan.name,
                "quantized_graph": source,
                "shape_inference": shapes,
                "per_channel": True,
                "weight_type": "QInt8",
                "kept_fp32_nodes": excluded,
            }
    return _fail(target, report, error, reports)


def _fail(
    target: Path, report: ParityReport | None, error: RunFailure | None, reports: list[ParityReport]
) -> NoReturn:
    """Every plan of a precision failed: raise with the last figures (or the last error)."""
    target.unlink(missing_ok=True)
    if report is None:
        raise RunFailure(str(error))
    raise ParityFailure(f"parity gate failed: {report.summary()}", [*reports, report])


def _quantizable_graph(
    stage: Path, work: Path, optimized: bool, say: Callable[[str], None]
) -> tuple[Path, str, str]:
    """The pre-processed graph to quantize: the fused one, else the plain traced one.

    Quantizing the fused graph turns Attention into QAttention (the fast path). If this
    onnxruntime cannot pre-process or quantize it, the unfused graph still quantizes every
    MatMul; which one was used is recorded in `embedkit.json`.
    """
    from embedkit.export.precision import INT8_PLANS, prepare_for_quantization, quantize_int8

    errors = []
    candidates = [("fused", stage / PRECISION_FILES["fp32"])] if optimized else []
    for source, graph in (*candidates, ("traced", work / "raw.onnx")):
        prepared = work / f"int8_prepared_{source}.onnx"
        try:
            shapes = prepare_for_quantization(graph, prepared)
            quantize_int8(prepared, work / "int8_probe.onnx", INT8_PLANS[0])  # can it quantize at all?
            return prepared, source, shapes
        except RunFailure as exc:
            errors.append(f"{source} graph: {exc}")
            say(f"int8: the {source} graph cannot be quantized here, trying the next")
    raise RunFailure("; ".join(errors))
