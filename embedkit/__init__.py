"""embedkit: train in-domain sentence encoders with miCSE, export them to ONNX, embed, index, evaluate.

The names below are loaded on first use, so `import embedkit` stays light (no torch, no
onnxruntime, no faiss until a function that needs one is called).
"""

from __future__ import annotations

from embedkit.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Collection": "embedkit.collection",
    "create_collection": "embedkit.collection",
    "open_collection": "embedkit.collection",
    "load_encoder": "embedkit.encode.loading",
    "Runtime": "embedkit.encode.runtime",
    "Encoder": "embedkit.encode.protocol",
    "Evaluator": "embedkit.evaluation.evaluator",
    "OnnxEncoder": "embedkit.encode.onnx_backend",
    "read_documents": "embedkit.data.corpus",
    "embed_to_file": "embedkit.jobs.streaming",
    "embed_shard": "embedkit.jobs.sharding",
    "embed_with_ray": "embedkit.jobs.distributed",
    "Shard": "embedkit.jobs.parts",
    "IndexOptions": "embedkit.jobs.index_options",
    "build_index": "embedkit.jobs.index_build",
    "build_index_from_vectors": "embedkit.jobs.index_from_parts",
    "SearchIndex": "embedkit.index.search",
    "evaluate_sts": "embedkit.evaluation.sts",
    "evaluate_retrieval": "embedkit.evaluation.retrieval",
    "StsEvaluator": "embedkit.evaluation.sts",
    "RetrievalEvaluator": "embedkit.evaluation.retrieval",
    "TrainConfig": "embedkit.training.config",
    "train": "embedkit.training.trainer",
    "InputError": "embedkit.errors",
    "RunFailure": "embedkit.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("embedkit", _EXPORTS, globals())
