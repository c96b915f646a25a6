"""embedkit: train in-domain sentence encoders with miCSE, export them to ONNX, embed, index, evaluate.

The names below are loaded on first use, so `import embedkit` stays light (no torch, no
onnxruntime, no faiss until a function that needs one is called).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "load_encoder": "embedkit.encoder",
    "Encoder": "embedkit.encoder",
    "OnnxEncoder": "embedkit.onnx_encoder",
    "read_documents": "embedkit.corpus",
    "embed_to_file": "embedkit.embed",
    "build_index": "embedkit.index",
    "SearchIndex": "embedkit.index",
    "evaluate_sts": "embedkit.evaluation",
    "evaluate_retrieval": "embedkit.evaluation",
    "StsEvaluator": "embedkit.evaluation",
    "RetrievalEvaluator": "embedkit.evaluation",
    "TrainConfig": "embedkit.training.config",
    "train": "embedkit.training.trainer",
    "InputError": "embedkit.errors",
    "RunFailure": "embedkit.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'embedkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
