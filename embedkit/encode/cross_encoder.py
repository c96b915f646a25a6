"""Cross-encoders: a (query, text) pair in, one relevance score out, as sentence-transformers scores it.

A cross-encoder reads the query and a document together, so it judges their relevance more closely
than two vectors' cosine can, at the price of one model run per pair: it re-ranks the first hits of
a search (`embedkit.search.rerank`), and it answers TEI's `POST /rerank` (`embedkit.serve.tei`).

The folder is what sentence-transformers' `CrossEncoder.save` writes (versions 2 to 6): a Hugging
Face `*ForSequenceClassification` model with one label, its tokenizer, and the activation that
`CrossEncoder.predict` puts on the logit by default, recorded as `activation_fn` in
`config_sentence_transformers.json` (6), under `sentence_transformers` in `config.json` (4 and 5)
or as `sbert_ce_default_activation_function` (before 4); where none is recorded, the sigmoid, as
`CrossEncoder` chooses for one label. Pairs are cut as `CrossEncoder` cuts them (`longest_first`
at the tokenizer's `model_max_length`, within the model's positions). A folder whose scores
embedkit cannot reproduce (several labels, other modules, a default prompt, an activation other
than the sigmoid or identity) is refused in one line, never scored differently.

No torch at module level: `CrossEncoderModel` imports it when a torch folder is opened; an export
(`embedkit export` of a cross-encoder: `embedkit.export.cross_encoder`) runs in ONNX Runtime.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.json_file import read_json
from embedkit.encode.model_folder import max_seq_length_for, resolve_model_path
from embedkit.errors import InputError

# CrossEncoder's activations, by the dotted name it records, as embedkit applies them
ACTIVATIONS = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
}
_TRANSFORMER_MODULES = (
    "sentence_transformers.base.modules.transformer.Transformer",
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.transformer.Transformer",
)
# Pairs scored in one model run: CrossEncoder.predict's default batch size.
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class CrossEncoderSpec:
    """What scoring needs to know about a cross-encoder folder (read without torch)."""

    path: Path
    architecture: str  # config.json's, e.g. "BertForSequenceClassification"
    activation: str  # "sigmoid" or "identity": what a score is, from the logit
    max_length: int  # tokens of one (query, text) pair, specials included
    onnx: bool = False  # an export (`embedkit export` of a cross-encoder): model.onnx, no torch


def is_cross_encoder(model: str | Path) -> bool:
    """Whether the folder holds a classification model (config.json's architectures), not an encoder."""
    config_path = resolve_model_path(str(model)) / "config.json"
    config = read_json(config_path) if config_path.is_file() else {}
    return any(str(a).endswith("ForSequenceClassification") for a in config.get("architectures") or [])


def read_cross_encoder(model: str | Path) -> CrossEncoderSpec:
    """Describe a cross-encoder folder; an `InputError` naming what embedkit cannot reproduce."""
    path = resolve_model_path(str(model))
    if not (path / "config.json").is_file():
        raise InputError(f"not a model folder: {path} (expected config.json)")
    meta_path = path / "embedkit.json"
    if (path / "model.onnx").is_file() and meta_path.is_file():
        meta = read_json(meta_path)
        if meta.get("kind") != "cross-encoder":
            raise InputError(f"{path} is not a cross-encoder: it is an export of a sentence encoder")
        activation = str(meta.get("activation"))
        if activation not in ACTIVATIONS.values():
            raise InputError(f"{meta_path}: activation {activation!r} cannot be reproduced here")
        return CrossEncoderSpec(path, str(meta["architecture"]), activation, int(meta["max_length"]), True)
    config = read_json(path / "config.json")
    architectures = [str(a) for a in config.get("architectures") or []]
    found = next((a for a in architectures if a.endswith("ForSequenceClassification")), None)
    if found is None:
        raise InputError(
            f"{path} is not a cross-encoder: config.json names {architectures or 'no architecture'}, not a "
            "*ForSequenceClassification model (as sentence-transformers' CrossEncoder saves one)"
        )
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else int(config.get("num_labels", 1) or 1)
    if count != 1:
        raise InputError(f"{path} scores {count} labels a pair; a re-ranker needs one score (num_labels 1)")
    _check_modules(path)
    st_path = path / "sentence_bert_config.json"
    st_config = read_json(st_path) if st_path.is_file() else {}
    return CrossEncoderSpec(
        path, found, _activation(path, config), max_seq_length_for(path, config, st_config)
    )


def _check_modules(path: Path) -> None:
    """Refuse a folder whose pipeline holds more than the classification model, or a default prompt."""
    modules_path = path / "modules.json"
    if modules_path.is_file():
        try:
            modules = json.loads(modules_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{modules_path}: not readable JSON ({exc})") from None
        kinds = [str(m.get("type")) for m in modules] if isinstance(modules, list) else ["?"]
        if any(kind not in _TRANSFORMER_MODULES for kind in kinds) or len(kinds) > 1:
            raise InputError(
                f"{modules_path}: modules {kinds} after the classifier cannot be reproduced here"
            )
    st_config = path / "config_sentence_transformers.json"
    if st_config.is_file() and read_json(st_config).get("default_prompt_name"):
        raise InputError(f"{st_config}: a default prompt on every pair cannot be reproduced here")


def _activation(path: Path, config: dict[str, Any]) -> str:
    """The activation `CrossEncoder.predict` applies by default (see the module docstring)."""
    st_config_path = path / "config_sentence_transformers.json"
    st_config = read_json(st_config_path) if st_config_path.is_file() else {}
    recorded = (
        st_config.get("activation_fn")
        or (config.get("sentence_transformers") or {}).get("activation_fn")
        or config.get("sbert_ce_default_activation_function")
    )
    if recorded is None:
        return "sigmoid"
    if recorded not in ACTIVATIONS:
        known = ", ".join(ACTIVATIONS)
        raise InputError(f"{path}: activation {recorded!r} cannot be reproduced here (known: {known})")
    return ACTIVATIONS[recorded]


def activate(logits: np.ndarray, activation: str) -> np.ndarray:
    """Scores from logits: the sigmoid, or the logits themselves."""
    logits = np.asarray(logits, dtype=np.float32)
    if activation == "identity":
        return logits
    return (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)


class CrossEncoderModel:
    """A cross-encoder folder opened for scoring: `score(query, texts)` and `score_pairs(pairs)`;
    a torch folder runs in torch, an export (`embedkit export`) in ONNX Runtime without torch."""

    def __init__(self, model: str | Path, device: str = "auto", batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.spec = read_cross_encoder(model)
        self.path = self.spec.path
        self.batch_size = batch_size
        self.backend = "onnx" if self.spec.onnx else "torch"
        self._lock = threading.Lock()  # one run at a time: `/rerank` and `/search` share the model
        if self.spec.onnx:
            from embedkit.encode.onnx_backend import create_session

            self._session, self._device = create_session(self.path / "model.onnx", device)
            self._inputs = [i.name for i in self._session.get_inputs()]
            self.tokenizer = _tokenizer(self.spec)
        else:
            from embedkit.encode.devices import torch_device

            self._device = torch_device(device)
            self.tokenizer, self.torch_model = _load(self.spec, self._device)  # the export traces it

    @classmethod
    def from_graph(cls, folder: Path, spec: CrossEncoderSpec) -> CrossEncoderModel:
        """The graph in `folder` (an export being written) with `spec`'s settings, on the CPU."""
        from dataclasses import replace

        from embedkit.encode.onnx_backend import create_session

        model = cls.__new__(cls)
        model.spec, model.path, model.batch_size = (
            replace(spec, path=folder, onnx=True),
            folder,
            DEFAULT_BATCH_SIZE,
        )
        model.backend, model._lock = "onnx", threading.Lock()
        model._session, model._device = create_session(folder / "model.onnx", "cpu")
        model._inputs = [i.name for i in model._session.get_inputs()]
        model.tokenizer = _tokenizer(model.spec)
        return model

    @property
    def device(self) -> str:
        return str(self._device)

    def first_cut(self, query: str, texts: Sequence[str]) -> int | None:
        """The position of the first text that, paired with `query`, is cut at `max_length`; or None."""
        lengths = self.tokenizer([query] * len(texts), list(texts), truncation=False)["input_ids"]
        return next((i for i, ids in enumerate(lengths) if len(ids) > self.spec.max_length), None)

    def score(self, query: str, texts: Sequence[str], raw: bool = False) -> np.ndarray:
        """float32 [len(texts)]: each text's relevance to `query`; `raw`: the logits."""
        return self.score_pairs([(query, text) for text in texts], raw=raw)

    def score_pairs(self, pairs: Sequence[tuple[str, str]], raw: bool = False) -> np.ndarray:
        """float32 [len(pairs)], in the pairs' order: longest pairs batched together, as
        `CrossEncoder.predict` batches them, so that padding costs little."""
        logits = np.empty(len(pairs), dtype=np.float32)
        order = np.argsort([-(len(q) + len(t)) for q, t in pairs], kind="stable")
        for first in range(0, len(pairs), self.batch_size):
            rows = order[first : first + self.batch_size]
            logits[rows] = self._logits([pairs[i] for i in rows])
        return logits if raw else activate(logits, self.spec.activation)

    def _logits(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        """One batch's logits, [len(pairs)], pairs cut as `CrossEncoder` cuts them."""
        tensors = "np" if self.spec.onnx else "pt"
        batch = self.tokenizer(
            [q for q, _ in pairs],
            [t for _, t in pairs],
            padding=True,
            truncation="longest_first",
            max_length=self.spec.max_length,
            return_tensors=tensors,
        )
        if self.spec.onnx:
            feed = {name: batch[name].astype(np.int64) for name in self._inputs}
            with self._lock:
                scores: np.ndarray = self._session.run(None, feed)[0]  # onnxruntime ships no types
                return scores.reshape(len(pairs))
        import torch

        with self._lock, torch.inference_mode():
            out: torch.Tensor = self.torch_model(**batch.to(self._device)).logits
        return out.float().reshape(len(pairs)).cpu().numpy()


def _tokenizer(spec: CrossEncoderSpec) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(spec.path))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load the tokenizer of {spec.path}: {str(exc).splitlines()[0]}") from None


def _load(spec: CrossEncoderSpec, device: Any) -> tuple[Any, Any]:
    """The folder's tokenizer and classification model, in eval mode on `device`."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _tokenizer(spec)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(str(spec.path))
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(
            f"cannot load a cross-encoder from {spec.path}: {str(exc).splitlines()[0]}"
        ) from None
    return tokenizer, model.eval().to(device)
