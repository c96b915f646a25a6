"""From texts to vectors: model folders, tokenizing and batching, the encoders, streaming embedding.

`model_folder` reads a folder once into a `ModelSpec`; `batching` tokenizes and length-sorts;
`protocol` defines the `Encoder` every backend satisfies; `onnx_backend` (ONNX Runtime) and
`torch_backend` (PyTorch, imported only when a torch folder is opened) implement it; `loading`
picks one for a folder; `streaming` embeds a whole corpus with bounded memory; `parts` is the
format of a corpus's vectors cut into shards, `sharding` embeds one shard, `distributed` all of
them on a Ray cluster.
"""

from embedkit.encode.loading import load_encoder
from embedkit.encode.protocol import Encoder

__all__ = ["Encoder", "load_encoder"]
