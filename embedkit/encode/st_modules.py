"""sentence-transformers' module pipeline of a model folder: `modules.json` and each module's config.

This is the one place that reads those files. It turns them into a `SentenceModules`, which the
torch encoder (`embedkit.encode.torch_head`), the ONNX graph (`embedkit.export.onnx_graph`) and
every reported dimension (`ModelSpec.dim`, `embedkit-index.json`, `embed`'s output) follow.

The modules sentence-transformers writes for embedding models are supported, in its order:
Transformer (the Hugging Face model at the folder root), Pooling in every mode and combination,
then any sequence of Dense and Normalize. Any other module, and any setting of these that changes
the vectors in a way embedkit does not reproduce (a Pooling that leaves the prompt out, a
Transformer that is not the model's last hidden state or that loads with changed arguments), is
refused in one line naming it, rather than embedded as if it were not there. Formats read
(sentence-transformers 2 to 6):

- Pooling: the boolean `pooling_mode_*_token(s)` keys, or `pooling_mode` as a name or a list
  (5+). Several modes are concatenated in the order sentence-transformers uses;
- Dense: `config.json` (`in_features`, `out_features`, `bias`, `activation_function`,
  `use_residual`) and `model.safetensors`. A Dense stored only as `pytorch_model.bin` is refused:
  that is a pickle, and embedkit loads no pickle a user hands it.

No torch here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from embedkit.encode.json_file import read_json
from embedkit.errors import InputError

# Pooling modes in the order sentence-transformers concatenates the boolean-key format's modes.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
POOLING_SEPARATOR = "+"  # "cls+mean": the name of a concatenation, in `embedkit.json` and --pooling

# Dense activations: the torch.nn classes sentence-transformers may name, that take no arguments.
ACTIVATIONS = ("Tanh", "Identity", "ReLU", "GELU", "SiLU", "Sigmoid", "LeakyReLU", "ELU", "Softsign")
DENSE_WEIGHTS = "model.safetensors"

NORMALIZE = "normalize"  # a Normalize step that a Dense follows (a final one is `normalize`)
_PREFIX = "sentence_transformers."
_SENTENCE_INPUT = "sentence_embedding"


@dataclass(frozen=True)
class DenseLayer:
    """One Dense module: activation(x @ W.T + b) (+ x, or x @ R.T when `residual`)."""

    folder: Path  # holds model.safetensors: linear.weight, linear.bias, residual.weight
    in_features: int
    out_features: int
    bias: bool
    activation: str  # a torch.nn class name from ACTIVATIONS
    residual: bool

    def describe(self) -> dict[str, Any]:
        return {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.bias,
            "activation": self.activation,
            "residual": self.residual,
        }


@dataclass(frozen=True)
class SentenceModules:
    """What happens to the Transformer's token vectors: pooling, then `steps`, then `normalize`."""

    pooling: tuple[str, ...]  # modes, concatenated in this order
    steps: tuple[DenseLayer | str, ...]  # Dense layers and inner Normalize steps (NORMALIZE)
    normalize: bool  # the pipeline ends with a Normalize: its vectors are unit length
    hidden_size: int  # the Transformer's token vector size

    @property
    def pooling_name(self) -> str:
        return POOLING_SEPARATOR.join(self.pooling)

    @property
    def dim(self) -> int:
        """The sentence vector's size: the last Dense's output, else the pooled size."""
        dense = [s for s in self.steps if isinstance(s, DenseLayer)]
        return dense[-1].out_features if dense else len(self.pooling) * self.hidden_size

    @property
    def dense(self) -> tuple[DenseLayer, ...]:
        return tuple(s for s in self.steps if isinstance(s, DenseLayer))

    def with_pooling(self, name: str) -> SentenceModules:
        """The same pipeline with another pooling (e.g. training's --pooling); dims must still fit."""
        modules = replace(self, pooling=parse_pooling_name(name))
        _check_dims(modules, Path("--pooling"))
        return modules


def parse_pooling_name(name: str) -> tuple[str, ...]:
    """Modes from a name such as "mean" or "cls+mean"; an `InputError` naming the valid ones."""
    modes = tuple(name.split(POOLING_SEPARATOR)) if isinstance(name, str) else ()
    bad = [m for m in modes if m not in POOLING_MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise InputError(
            f"unknown pooling {name!r}: use one of {', '.join(POOLING_MODES)}, or several joined by "
            f"{POOLING_SEPARATOR!r}"
        )
    return modes


def pooling_modes(config: dict[str, Any], where: Path) -> tuple[str, ...]:
    """The modes of a Pooling `config.json`, in either format, as sentence-transformers reads it."""
    if "pooling_mode" in config:  # sentence-transformers 5+; wins over boolean keys, as there
        value = config["pooling_mode"]
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise InputError(f"{where}: 'pooling_mode' must be a mode name or a list of them, got {value!r}")
        bad = [n for n in names if n not in POOLING_MODES]
        if bad:
            raise InputError(
                f"{where}: unknown pooling mode {bad[0]!r}: known are {', '.join(POOLING_MODES)}"
            )
        return tuple(dict.fromkeys(names))
    modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if config.get(key))
    return modes or ("mean",)  # sentence-transformers' default when no key is set


def read_st_modules(path: Path, hidden_size: int) -> SentenceModules:
    """The folder's module pipeline; a folder without `modules.json` pools with cls (SimCSE)."""
    entries = _modules_json(path)
    if entries is None:
        return SentenceModules(("cls",), (), False, hidden_size)
    kinds = [_module_kind(entry, path) for entry in entries]
    if kinds[:2] != ["Transformer", "Pooling"] or "Transformer" in kinds[1:] or "Pooling" in kinds[2:]:
        order = ", ".join(kinds) or "no modules"
        raise InputError(
            f"{path / 'modules.json'}: expected Transformer, Pooling, then Dense or Normalize modules; "
            f"got {order}"
        )
    if str(entries[0].get("path", "")) not in ("", "."):
        raise InputError(
            f"{path / 'modules.json'}: the Transformer must be the folder itself, not {entries[0]['path']!r}"
        )
    _check_transformer_config(path)
    pooling_config = _module_config(path, entries[1])
    pooling_path = _module_dir(path, entries[1]) / "config.json"
    if pooling_config.get("include_prompt", True) is False:
        raise InputError(
            f"{pooling_path}: the Pooling leaves the prompt's tokens out (include_prompt: false), "
            "which embedkit does not reproduce"
        )
    pooling = pooling_modes(pooling_config, pooling_path)
    steps: list[DenseLayer | str] = []
    for entry, kind in zip(entries[2:], kinds[2:], strict=True):
        steps.append(_dense(path, entry) if kind == "Dense" else _normalize(path, entry))
    normalize = bool(steps) and steps[-1] == NORMALIZE
    if normalize:
        steps.pop()
    modules = SentenceModules(pooling, tuple(steps), normalize, hidden_size)
    _check_dims(modules, path / "modules.json")
    return modules


def dense_weight_files(path: Path) -> list[Path]:
    """The Dense modules' weight files named by `modules.json` (for the model's fingerprint)."""
    entries = _modules_json(path) or []
    folders = [_module_dir(path, e) for e in entries if _module_kind(e, path, strict=False) == "Dense"]
    return [f / DENSE_WEIGHTS for f in folders if (f / DENSE_WEIGHTS).is_file()]


def pooling_from_folder(path: Path) -> str | None:
    """The pooling name of the folder's Pooling module, or None without `modules.json`."""
    entries = _modules_json(path) or []
    for entry in entries:
        if _module_kind(entry, path, strict=False) == "Pooling":
            config = _module_config(path, entry)
            return POOLING_SEPARATOR.join(pooling_modes(config, _module_dir(path, entry) / "config.json"))
    return None


# ----- reading one module ----------------------------------------------------------------------


def _modules_json(path: Path) -> list[dict[str, Any]] | None:
    modules_path = path / "modules.json"
    if not modules_path.is_file():
        return None
    try:
        entries = json.loads(modules_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {modules_path}: {exc}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{modules_path}: expected a list of modules")
    return entries


# sentence_bert_config.json keys (the Transformer module's config) whose values change the vectors
# in ways embedkit does not reproduce, with the values it does (None: absent). A folder with any
# other value is refused rather than embedded differently.
_TRANSFORMER_SETTINGS: dict[str, tuple[Any, ...]] = {
    "transformer_task": (None, "feature-extraction"),
    "module_output_name": (None, "token_embeddings"),
    "processing_kwargs": (None, {}),  # how texts are tokenized and truncated (sentence-transformers 6)
    "query_length": (None,),  # multi-vector (late-interaction) models
    "document_length": (None,),
    "query_expansion": (None,),
}
# Arguments sentence-transformers passes to transformers when it loads the folder; only keys that
# change where files come from or how fast the model runs are accepted in them.
_LOADING_ARGUMENTS = (
    "model_args", "model_kwargs", "tokenizer_args", "processor_kwargs", "config_args", "config_kwargs"
)
_LOADING_ONLY = {
    "trust_remote_code", "revision", "token", "cache_dir", "local_files_only", "use_fast", "padding_side",
    "torch_dtype", "dtype", "attn_implementation", "device_map", "low_cpu_mem_usage",
}  # fmt: skip


def _check_transformer_config(path: Path) -> None:
    """The Transformer module runs as embedkit runs it: the model's last hidden state, as it loads."""
    st_path = path / "sentence_bert_config.json"
    config = read_json(st_path) if st_path.is_file() else {}
    for key, accepted in _TRANSFORMER_SETTINGS.items():
        if config.get(key) not in accepted:
            raise InputError(f"{st_path}: {key} {config[key]!r} is not supported by embedkit")
    for key in _LOADING_ARGUMENTS:
        arguments = config.get(key) or {}
        changed = sorted(set(arguments) - _LOADING_ONLY) if isinstance(arguments, dict) else [str(arguments)]
        if changed:
            raise InputError(f"{st_path}: {key} {changed[0]!r} is not supported by embedkit")
    modality = config.get("modality_config")
    text = modality.get("text") if isinstance(modality, dict) else None
    output = text.get("method_output_name") if isinstance(text, dict) else None
    if output not in (None, "last_hidden_state"):
        raise InputError(f"{st_path}: the text output {output!r} is not supported (only last_hidden_state)")


def _module_kind(entry: dict[str, Any], path: Path, strict: bool = True) -> str:
    """Transformer, Pooling, Dense or Normalize; any other module is refused, naming it."""
    type_name = str(entry.get("type", ""))
    kind = type_name.rsplit(".", 1)[-1]
    if type_name.startswith(_PREFIX) and kind in ("Transformer", "Pooling", "Dense", "Normalize"):
        return kind
    if not strict:
        return ""
    raise InputError(
        f"{path / 'modules.json'}: module {type_name or '(no type)'!r} is not supported "
        "(embedkit runs Transformer, Pooling, Dense and Normalize)"
    )


def _module_dir(path: Path, entry: dict[str, Any]) -> Path:
    sub = str(entry.get("path", ""))
    folder = (path / sub).resolve()
    if sub and path.resolve() not in folder.parents:
        raise InputError(f"{path / 'modules.json'}: module path {sub!r} leaves the model folder")
    return path / sub if sub else path


def _module_config(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    config_path = _module_dir(path, entry) / "config.json"
    if not config_path.is_file():
        raise InputError(f"{config_path} is missing: the {_module_kind(entry, path)} module has no config")
    return read_json(config_path)


def _dense(path: Path, entry: dict[str, Any]) -> DenseLayer:
    folder = _module_dir(path, entry)
    config, where = _module_config(path, entry), folder / "config.json"
    sizes: dict[str, Any] = {key: config.get(key) for key in ("in_features", "out_features")}
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{where}: {key!r} must be a positive integer, got {value!r}")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, _SENTENCE_INPUT):
            raise InputError(
                f"{where}: a Dense on {config[key]!r} is not supported (only on sentence_embedding)"
            )
    if not (folder / DENSE_WEIGHTS).is_file():
        stored = (
            "pytorch_model.bin, a pickle embedkit does not load"
            if (folder / "pytorch_model.bin").is_file()
            else "none"
        )
        raise InputError(
            f"{folder}: the Dense module needs {DENSE_WEIGHTS} (found {stored}); re-save it with safetensors"
        )
    return DenseLayer(
        folder=folder,
        in_features=sizes["in_features"],  # checked above: positive integers
        out_features=sizes["out_features"],
        bias=bool(config.get("bias", True)),
        activation=_activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"), where),
        residual=bool(config.get("use_residual", False)),
    )


def _activation(value: object, where: Path) -> str:
    """The torch.nn class name of a Dense's `activation_function` (Tanh when absent, as there)."""
    name = value.rsplit(".", 1)[-1] if isinstance(value, str) and value.startswith("torch.") else None
    if name not in ACTIVATIONS:
        raise InputError(
            f"{where}: activation_function {value!r} is not supported: "
            f"use torch.nn's {', '.join(ACTIVATIONS)}"
        )
    return name


def _normalize(path: Path, entry: dict[str, Any]) -> str:
    config_path = _module_dir(path, entry) / "config.json"
    config = _module_config(path, entry) if config_path.is_file() else {}  # older saves write none
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, _SENTENCE_INPUT):
            raise InputError(f"{config_path}: a Normalize on {config[key]!r} is not supported")
    return NORMALIZE


def _check_dims(modules: SentenceModules, where: Path) -> None:
    """Each Dense takes the size the step before it gives, as its weights will require."""
    size = len(modules.pooling) * modules.hidden_size
    if not size:
        return  # a config without the hidden size: the weights are checked when they load
    for layer in modules.dense:
        if layer.in_features != size:
            raise InputError(
                f"{layer.folder / 'config.json'}: the Dense takes {layer.in_features}-d vectors, "
                f"but the modules before it give {size}-d ({where})"
            )
        size = layer.out_features
