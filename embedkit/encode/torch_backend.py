"""Embedding with a torch model folder: the reference that ONNX exports are checked against.

The same tokenization and length-sorted batching as the ONNX runtime (`embedkit.encode.batching`),
then the folder's sentence-transformers modules after the Transformer (pooling in any mode, Dense,
Normalize) as `modules.json` lists them (`embedkit.encode.st_modules`, `embedkit.encode.torch_head`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embedkit.encode.batching import TokenBatcher, check_tokenizer_workers, tokenizer_workers_for
from embedkit.encode.devices import torch_device
from embedkit.encode.identity import torch_identity
from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.encode.protocol import EncoderBase
from embedkit.encode.st_modules import read_st_modules
from embedkit.encode.stages import EncoderStages
from embedkit.encode.token_arrays import Batch
from embedkit.encode.torch_head import SentenceHead
from embedkit.errors import InputError


def load_backbone(path: Path, **kwargs: object) -> torch.nn.Module:
    """The Hugging Face encoder in a folder (`AutoModel`), with a clear error for non-models."""
    from safetensors import SafetensorError
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load drowns our own progress and error lines
    try:
        model: torch.nn.Module = AutoModel.from_pretrained(str(path), **kwargs)  # typed Any there
        return model
    except (OSError, ValueError, KeyError, SafetensorError) as exc:
        raise InputError(f"cannot load a model from {path}: {str(exc).splitlines()[0]}") from None


class TorchEncoder(EncoderBase):
    """Encode texts with a Hugging Face model folder in torch (inference: no MLP head, no dropout)."""

    backend = "torch"
    precision = "fp32"

    def __init__(
        self,
        model: str | Path | ModelSpec | None = None,
        device: str = "auto",
        pooling: str | None = None,
        max_seq_length: int | None = None,
        tokenizer_workers: int | None = None,
    ) -> None:
        check_tokenizer_workers(tokenizer_workers)
        spec: ModelSpec = read_model_spec(model)
        if spec.kind != "torch":
            raise InputError(f"{spec.path} is an ONNX folder; load it with embedkit.load_encoder")
        self.spec = spec
        self.path = spec.path
        modules = spec.modules if spec.modules is not None else read_st_modules(spec.path, 0)
        if pooling is not None:
            modules = modules.with_pooling(pooling)
        self.pooling = modules.pooling_name
        self.normalize_default = spec.normalize
        self.max_seq_length = int(max_seq_length or spec.max_seq_length)
        self.device = torch_device(device)
        self.model = load_backbone(spec.path).to(self.device).eval()
        self.head = SentenceHead(modules).to(self.device).eval()
        config: Any = self.model.config  # a transformers PretrainedConfig
        self.dim = modules.dim if modules.hidden_size else int(config.hidden_size)
        self.batcher = TokenBatcher(spec.path, self.max_seq_length)
        self.uses_token_type_ids = "token_type_ids" in inspect.signature(self.model.forward).parameters
        workers = tokenizer_workers_for(self.device) if tokenizer_workers is None else tokenizer_workers
        self.shapes = None  # torch runs every batch at its own shape
        self.stages = EncoderStages(
            self.batcher, self.run_batch, self.dim, type_ids=self.uses_token_type_ids, workers=workers
        )
        # with the pooling and length asked for: they change the vectors, so they are in the identity
        self.identity = torch_identity(spec, pooling, max_seq_length)

    @property
    def fingerprint(self) -> str:
        return self.identity.fingerprint

    @property
    def truncated(self) -> int:
        return self.batcher.truncated

    @torch.inference_mode()
    def run_batch(self, batch: Batch, normalize: bool | None = None) -> np.ndarray:
        """Sentence vectors (float32 [B, dim]) of one padded batch; `normalize=None`: the model's."""
        do_normalize = self.normalize_default if normalize is None else normalize
        inputs = {
            "input_ids": torch.from_numpy(batch.input_ids).to(self.device),
            "attention_mask": torch.from_numpy(batch.attention_mask).to(self.device),
        }
        if self.uses_token_type_ids:
            inputs["token_type_ids"] = torch.from_numpy(batch.token_type_ids).to(self.device)
        hidden = self.model(**inputs).last_hidden_state
        vectors: torch.Tensor = self.head(hidden, inputs["attention_mask"], do_normalize)
        return vectors.cpu().numpy()

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        def run(batch: Batch) -> np.ndarray:
            return self.run_batch(batch, normalize)

        return self.stages.encode(texts, batch_size, progress=progress, run=run)
