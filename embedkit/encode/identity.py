"""A model's identity: one fingerprint over everything that changes the vectors it gives.

An index, a push record and the part files of `embed --shard` record the fingerprint of the model
that made their vectors; every later use of another model with them (`index --append --model`,
`search --model`, `serve --index`, `eval retrieval --index`, `push`, `index --from-vectors`) is
checked here, by `check_same_model`. Two folders are the same model when all of these agree:

- weights: the Transformer's weight file and each Dense module's (`model_folder.weights_fingerprint`);
- config: the Transformer's `config.json` (activation, layer norm epsilon, ...), bookkeeping keys aside;
- tokenizer: the tokenizer files the runtime reads (`TOKENIZER_FILES`), and whether texts are
  lower-cased before it (`model_folder.lowercases_text`);
- pipeline: pooling modes, each Dense layer's sizes, activation, bias and residual, inner Normalize
  steps, and whether the pipeline ends by normalising;
- max_seq_length: where texts are cut;
- precision class: "float" (torch, ONNX fp32 and fp16, which the export's parity gate holds to a
  cosine of 0.999 and more with torch) or "int8" (quantized weights: a mean cosine near 0.987).

An ONNX export cannot recompute its source's weights, config or pipeline (the graph holds them),
so the export records them (`identity` in `embedkit.json`): the export and its torch source have
one fingerprint, and indexes accept either form. Its tokenizer files and maximum length are read
from the export folder itself, so a copy with another tokenizer or length is another model.

Fingerprints start with `FINGERPRINT_PREFIX`; a record without it was written by an earlier
embedkit that fingerprinted the weights alone (`check_same_model` says how those are compared).
No torch here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.encode.json_file import read_json
from embedkit.encode.model_folder import (
    ModelSpec,
    fingerprint_files,
    lowercases_text,
    read_model_spec,
    weights_fingerprint,
)
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.encode.st_modules import SentenceModules

FINGERPRINT_PREFIX = "id-"
# Tokenizer files any Hugging Face tokenizer may need: hashed here, copied by export and training.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# config.json keys that record who saved the file, not how the model computes
_BOOKKEEPING = ("transformers_version", "architectures", "torch_dtype", "dtype")


def precision_class(precision: str | None) -> str:
    """ "int8" for quantized weights; every other precision gives the same vectors within parity."""
    return "int8" if precision == "int8" else "float"


@dataclass(frozen=True)
class ModelIdentity:
    """The parts of a model that change its vectors; `fingerprint` hashes them all."""

    weights: str
    config: str
    tokenizer: str
    pipeline: dict[str, Any]
    max_seq_length: int
    precision: str  # precision_class

    @property
    def fingerprint(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return FINGERPRINT_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:20]

    def differences(self, other: ModelIdentity) -> list[str]:
        """The names of the parts in which `other` differs (the pipeline's parts named one by one)."""
        names = [
            f
            for f in ("weights", "config", "tokenizer", "max_seq_length", "precision")
            if getattr(self, f) != getattr(other, f)
        ]
        for key in sorted(set(self.pipeline) | set(other.pipeline)):
            if self.pipeline.get(key) != other.pipeline.get(key):
                names.append({"steps": "Dense layers", "normalize": "normalization"}.get(key, key))
        return names


def pipeline_of(modules: SentenceModules) -> dict[str, Any]:
    """The pooling, Dense and Normalize steps as plain data (the Dense weights are in `weights`)."""
    steps = [s if isinstance(s, str) else s.describe() for s in modules.steps]
    return {"pooling": modules.pooling_name, "steps": steps, "normalize": modules.normalize}


def config_fingerprint(path: Path) -> str:
    """`config.json`'s content as the model reads it: key order, spacing and bookkeeping ignored."""
    config = read_json(path) if path.is_file() else {}
    kept = {k: v for k, v in config.items() if k not in _BOOKKEEPING and not k.startswith("_")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def tokenizer_fingerprint(folder: Path) -> str:
    """The tokenizer files' fingerprint, marked when sentence-transformers lower-cases texts first."""
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    fingerprint = fingerprint_files(files) if files else "none"
    return f"{fingerprint}+lowercase" if lowercases_text(folder) else fingerprint


def export_record(spec: ModelSpec, export_dir: Path) -> dict[str, Any]:
    """What an export writes under `identity` in `embedkit.json`: its torch source's parts, and its own
    tokenizer files' fingerprint (they may differ from the source's: a `tokenizer.json` is made)."""
    source = torch_identity(spec)
    return {
        "weights": source.weights,
        "config": source.config,
        "tokenizer": source.tokenizer,
        "export_tokenizer": tokenizer_fingerprint(export_dir),
        "pipeline": source.pipeline,
    }


def torch_identity(
    spec: ModelSpec, pooling: str | None = None, max_seq_length: int | None = None
) -> ModelIdentity:
    from embedkit.encode.st_modules import read_st_modules

    modules = spec.modules if spec.modules is not None else read_st_modules(spec.path, 0)
    if pooling is not None:
        modules = modules.with_pooling(pooling)
    return ModelIdentity(
        weights=weights_fingerprint(spec.path),
        config=config_fingerprint(spec.path / "config.json"),
        tokenizer=tokenizer_fingerprint(spec.path),
        pipeline=pipeline_of(modules),
        max_seq_length=int(max_seq_length or spec.max_seq_length),
        precision="float",
    )


def onnx_identity(spec: ModelSpec, precision: str | None = None) -> ModelIdentity:
    """An export's identity: its source's recorded parts, its own tokenizer and maximum length."""
    meta = spec.metadata
    record = meta.get("identity")
    own_tokenizer = tokenizer_fingerprint(spec.path)
    if isinstance(record, dict):
        try:
            weights, config, pipeline = (
                str(record["weights"]),
                str(record["config"]),
                dict(record["pipeline"]),
            )
            tokenizer = (
                str(record["tokenizer"]) if own_tokenizer == record["export_tokenizer"] else own_tokenizer
            )
        except (KeyError, TypeError, ValueError):
            raise InputError(
                f"{spec.path / 'embedkit.json'}: damaged 'identity': re-export the model"
            ) from None
    else:  # an export by an earlier embedkit: its weights' fingerprint, its copied files, no Dense record
        weights = str(meta.get("fingerprint", ""))
        config = config_fingerprint(spec.path / "config.json")
        tokenizer = own_tokenizer
        normalize = meta.get("source_normalize", meta.get("normalize", True))
        pipeline = {"pooling": spec.pooling, "steps": [], "normalize": bool(normalize)}
    return ModelIdentity(
        weights, config, tokenizer, pipeline, spec.max_seq_length, precision_class(precision)
    )


def model_identity(
    spec: ModelSpec,
    precision: str | None = None,
    pooling: str | None = None,
    max_seq_length: int | None = None,
) -> ModelIdentity:
    """The identity of the model in `spec` as run at `precision` (torch: with these overrides)."""
    if spec.kind == "onnx":
        return onnx_identity(spec, precision)
    return torch_identity(spec, pooling, max_seq_length)


def is_full(fingerprint: str) -> bool:
    """Whether a recorded fingerprint is a full identity (else: an earlier embedkit's weights only)."""
    return fingerprint.startswith(FINGERPRINT_PREFIX)


def check_same_model(
    recorded: str,
    recorded_model: str | Path | None,
    candidate: str,
    candidate_name: str | Path,
    holder: str,
    candidate_identity: ModelIdentity | None = None,
) -> None:
    """An `InputError` unless `candidate` (a fingerprint) is the model whose fingerprint `holder`
    (an index, a collection, part files) recorded as `recorded`, with `recorded_model` its folder.

    A full identity must be equal. A weights-only fingerprint (an earlier embedkit's) is accepted
    only where the identity can be proved: the recorded folder is still there, still has those
    weights, and its full identity (at either precision class) is the candidate's. Anything else
    is refused, naming the fix. `candidate_identity`, where known, lets the message name what differs.
    """
    if recorded == candidate:
        return
    if is_full(recorded) or not is_full(candidate):
        raise InputError(
            f"{candidate_name} is not the model {holder} recorded ({recorded_model}): "
            f"{_what_differs(recorded, recorded_model, candidate_identity)}"
            f"fingerprint {candidate}, not {recorded}"
        )
    spec = _read_recorded(recorded_model)
    proved = spec is not None and _weights_of(spec) == recorded
    known = {model_identity(spec, p).fingerprint for p in ("fp32", "int8")} if spec is not None else set()
    if proved and candidate in known:
        return
    why = (
        f"its model folder {recorded_model} is gone or unreadable"
        if spec is None
        else f"{recorded_model} has changed since"
        if not proved
        else f"{candidate_name} is not the model in {recorded_model}"
    )
    raise InputError(
        f"{holder} records only its model's weights (written by an earlier embedkit) and {why}: "
        f"rebuild it with {candidate_name} to record the model's full identity"
    )


def _read_recorded(path: str | Path | None) -> ModelSpec | None:
    if path is None:
        return None
    try:
        return read_model_spec(path)
    except InputError:
        return None


def _weights_of(spec: ModelSpec) -> str:
    if spec.kind == "onnx":
        record = spec.metadata.get("identity")
        return (
            str(record.get("weights")) if isinstance(record, dict) else str(spec.metadata.get("fingerprint"))
        )

    return weights_fingerprint(spec.path)


def _what_differs(recorded: str, recorded_model: str | Path | None, candidate: ModelIdentity | None) -> str:
    """ "its pooling and tokenizer differ; " where the recorded folder is still there, unchanged."""
    spec = _read_recorded(recorded_model)
    if spec is None or candidate is None:
        return ""
    for precision in ("fp32", "int8"):  # the folder at the precision class that made the vectors
        theirs = model_identity(spec, precision)
        if theirs.fingerprint == recorded:
            return f"it differs in {' and '.join(theirs.differences(candidate))}; "
    return ""  # the recorded folder changed since: nothing to name against it


def model_fingerprint(model: str | Path | ModelSpec | None) -> str:
    """The fingerprint of a model's full identity at its default precision: what indexes record
    and check (`model_fingerprint` in `embedkit-index.json`).

    An exported ONNX folder records its torch source's parts, so an index built with either form of
    the same model accepts the other.
    """
    return model_identity(read_model_spec(model)).fingerprint
