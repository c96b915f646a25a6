"""`export_model`: a torch model folder in, a verified ONNX folder out, or nothing at all.

Order of work: check every input first (cheap, exit 2 on a problem); trace the graph; optimize it
(`embedkit.export.optimize`); write the tokenizer and metadata; then for each precision build the
file and check its parity with the reference on the built-in sentences (plus `--calibration`, plus
`--dev-sts` Spearman; `embedkit.export.gates`). Everything
happens in a temporary folder beside the output that becomes the output only when every gate
has passed (`embedkit.storage.atomic.atomic_dir`): a failed gate or an interruption leaves nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embedkit import __version__
from embedkit.encode.identity import TOKENIZER_FILES, export_record, model_fingerprint
from embedkit.encode.model_folder import (
    MATRYOSHKA_DIMS,
    ModelSpec,
    read_json,
    read_model_spec,
    resolve_model_path,
)
from embedkit.encode.ort_import import import_onnxruntime
from embedkit.encode.precisions import PRECISION_FILES
from embedkit.encode.st_modules import read_st_modules
from embedkit.errors import InputError
from embedkit.export.gates import PARITY_BATCH_SIZE, GateRun, sts_spearman
from embedkit.export.parity import ParityGates, ParityReport, builtin_sentences, read_calibration
from embedkit.index.layout import check_not_in_index
from embedkit.storage.atomic import atomic_dir, scratch_dir, write_json_atomic
from embedkit.storage.locking import locked

# The tracer's opsets (14 to 20) export and run. Measured with onnxruntime 1.32: 14 to 17 fuse
# fully (6 Attention on MiniLM-L6); from 18 the optimizer fuses no Attention (only LayerNorm).
MIN_OPSET, MAX_OPSET = 14, 20


@dataclass
class ExportResult:
    """What `export_model` wrote: the folder, its files by precision, metadata and parity figures."""

    out_dir: Path
    files: dict[str, str]
    metadata: dict[str, Any]
    reports: list[ParityReport] = field(default_factory=list)


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
    from embedkit.export.onnx_graph import check_architecture, export_graph, load_eager_backbone
    from embedkit.export.optimize import candidate_graphs
    from embedkit.export.reference import reference_encoder as make_reference

    check_architecture(config)
    reference_encoder = make_reference(source, device, spec.max_seq_length)
    reference_name = reference_encoder.name
    fingerprint = model_fingerprint(source)
    import_onnxruntime()  # before any onnxruntime submodule: without its telemetry notice
    with scratch_dir("embedkit-export-") as work_name, atomic_dir(out) as stage:
        work = Path(work_name)
        say(f"tracing {source.name} ({spec.model_type}, opset {opset})")
        raw = work / "raw.onnx"
        info = export_graph(
            load_eager_backbone(source),
            raw,
            modules=spec.modules or read_st_modules(source, 0),
            normalize=normalize,
            opset=opset,
            token_embeddings=token_embeddings,
        )
        if optimize:
            say("optimizing the graph (onnxruntime's transformer fusions where they apply)")
        candidates = candidate_graphs(
            raw,
            work,
            optimize=optimize,
            num_heads=info.num_attention_heads,
            hidden_size=info.hidden_size,
            say=say,
        )
        _copy_model_files(source, stage)
        metadata = _graph_metadata(spec, stage, info, fingerprint, optimize)
        # The encoder reads this to run the parity check; it is rewritten with the figures below.
        write_json_atomic(stage / "embedkit.json", metadata)

        say(f"embedding the parity sentences with {reference_name}")
        texts = builtin_sentences(spec.max_seq_length) + extra
        run = GateRun(
            stage,
            texts,
            reference_encoder.encode(texts, PARITY_BATCH_SIZE, normalize, progress),
            gates,
            device,
            progress,
            say,
            sts=sts,
        )
        if sts is not None:
            run.torch_sts = sts_spearman(reference_encoder, sts, progress)
        del reference_encoder

        chosen, rejected = run.choose_fp32(candidates)
        metadata["fusion"] = chosen.fusion
        metadata["optimization"] = {"plan": chosen.plan, "applied": chosen.describe(), "rejected": rejected}
        say(f"optimization: {chosen.describe()}")
        if opset >= 18 and not chosen.fusion.get("Attention"):
            say(f"warning: no Attention is fused at opset {opset}; opsets 14 to 17 fuse it where it fits")
        if fp16:
            metadata["fp16"] = run.build_fp16()
        if int8:
            metadata["int8"] = run.build_int8(work, chosen, raw)
        metadata["precisions"] = [p for p in PRECISION_FILES if (stage / PRECISION_FILES[p]).is_file()]
        metadata["files"] = {p: PRECISION_FILES[p] for p in metadata["precisions"]}
        metadata["parity"] = {
            "sentences": len(texts),
            "builtin_sentences": len(texts) - len(extra),
            "calibration_sentences": len(extra),
            "dev_sts": str(dev_sts) if dev_sts is not None else None,
            "reference": reference_name,
            "torch_sts_spearman": run.torch_sts,
            "gates": asdict(gates),
            **{r.precision: r.as_json() for r in run.reports},
        }
        write_json_atomic(stage / "embedkit.json", metadata)
    return ExportResult(out, dict(metadata["files"]), metadata, run.reports)


def _graph_metadata(
    spec: ModelSpec, stage: Path, info: Any, fingerprint: str, optimize: bool
) -> dict[str, Any]:
    """`embedkit.json` before the parity checks: what the graph takes, gives and came from."""
    from embedkit.export.onnx_graph import exporter_versions

    return {
        "format": "embedkit-onnx",
        "embedkit_version": __version__,
        "fingerprint": fingerprint,
        # the source's parts of the identity, which the graph cannot show (`embedkit.encode.identity`)
        "identity": export_record(spec, stage),
        "source": str(spec.path),
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
        "opset": info.opset,
        "exporter": exporter_versions(),
        "optimized": optimize,
        "fusion": {},
        "precisions": ["fp32"],
        # Every name, so the parity check can open each file as it appears; narrowed at the end.
        "files": dict(PRECISION_FILES),
    }


# ----- checks on the inputs ------------------------------------------------------------------


def _check_source(model_dir: str | Path | None) -> tuple[Path, ModelSpec, dict[str, Any]]:
    source = resolve_model_path(model_dir).resolve()
    spec = read_model_spec(source)
    if spec.kind != "torch":
        raise InputError(f"{source} is already an ONNX export; export the torch model folder it came from")
    _check_graph_size(source)
    return source, spec, read_json(source / "config.json")


# An ONNX file is one protobuf message, which cannot exceed 2 GiB; larger graphs need their weights
# in separate files, which this export does not write.
MAX_GRAPH_BYTES = 2**31 - 2**26  # leaving 64 MiB for the graph's nodes


def _check_graph_size(source: Path) -> None:
    """Refuse a model whose fp32 weights (XLM-R large and up) cannot fit one ONNX file."""
    import math

    weights = source / "model.safetensors"
    if not weights.is_file():
        return  # the loader names the problem
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), "np") as tensors:
            names = tensors.keys()  # safe_open is not a mapping: it has keys() but no iteration
            count = sum(math.prod(tensors.get_slice(name).get_shape()) for name in names)
    except (OSError, SafetensorError) as exc:
        raise InputError(f"cannot read {weights}: {exc}") from None
    if 4 * count > MAX_GRAPH_BYTES:
        raise InputError(
            f"cannot export {source.name}: its {count / 1e6:.0f}M parameters take "
            f"{4 * count / 2**30:.1f} GiB in fp32, more than one ONNX file holds (2 GiB); run it with torch"
        )


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


# Files beside the weights that say how text goes in or what the model is: the prompts and
# lower-casing of sentence-transformers (`embedkit.encode.prefixes`, `embedkit.encode.batching`),
# and the model card and licence, which travel with the weights.
CARRIED_FILES = ("config_sentence_transformers.json", "sentence_bert_config.json", "README.md", "LICENSE")


def _copy_model_files(source: Path, stage: Path) -> None:
    """Copy the tokenizer, config.json and `CARRIED_FILES`; write tokenizer.json where it is missing."""
    for name in (*TOKENIZER_FILES, "config.json", *CARRIED_FILES):
        if (source / name).is_file():
            shutil.copyfile(source / name, stage / name)
    if not (stage / "tokenizer.json").is_file():
        # The runtime reads tokenizer.json with the `tokenizers` library alone, without transformers.
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(source)).backend_tokenizer.save(str(stage / "tokenizer.json"))
