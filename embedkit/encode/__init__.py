"""From texts to vectors: model folders, tokenizing and batching, the encoders.

`model_folder` reads a folder once into a `ModelSpec`; `stages` is the one path from texts to
vectors every caller takes (prepare, run, finish); `batching` tokenizes and length-sorts (tokenizer
workers ahead of the model) and `token_arrays` cuts padded batches from a flat table of ids;
`cuda_run` runs them on CUDA with IO binding and CUDA graphs; `shapes` owns the fixed batch shapes;
`protocol` defines the `Encoder` every backend satisfies; `onnx_backend` (ONNX Runtime) and
`torch_backend` (PyTorch, imported only when a torch folder is opened) implement it; `loading`
picks one for a folder; `devices` names where a model runs, and `runtime`'s `Runtime` holds every
run-time setting (device, precision, threads, ...), checked once and handed down whole. Embedding a
whole corpus with an encoder (streaming, shards, Ray) is `embedkit.jobs`.
"""

from embedkit.encode.loading import load_encoder
from embedkit.encode.protocol import Encoder
from embedkit.encode.runtime import Runtime

__all__ = ["Encoder", "Runtime", "load_encoder"]
