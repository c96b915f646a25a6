"""Export a Hugging Face encoder, with its sentence-transformers modules, as one ONNX graph.

The modules after the Transformer (pooling in any mode, Dense with its activation, Normalize, as
`embedkit.encode.st_modules` reads them) are traced with the backbone, so the graph's output is
the model's sentence vector, of the last Dense's size where there is one.

The graph maps `input_ids`, `attention_mask` (and `token_type_ids` when the model takes them)
to `sentence_embedding` [batch, dim], optionally also `token_embeddings` [batch, seq, dim],
with dynamic batch and sequence axes. Any ONNX Runtime user gets the model's sentence vector
from it without embedkit's Python.

Any encoder that transformers builds from `config.json` without the folder's own code is traced
the same way; no list of architectures is kept here. The graph's inputs are what the traced model
really reads (DeBERTa-v2 without token types drops `token_type_ids`), and the parity gates of
`embedkit.export.gates` decide whether the result is the model.

Exporter choice (measured on all-MiniLM-L6-v2, torch 2.13, onnxruntime 1.32): the TorchScript
tracer (`dynamo=False`) over the eager-attention model is what `onnxruntime.transformers.optimizer`
fuses fully (6 Attention, 12 SkipLayerNormalization, 6 BiasGelu, 1 EmbedLayerNormalization);
the dynamo exporter's graph gets no Attention fusion without rewriting it first.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from embedkit.encode.st_modules import SentenceModules
from embedkit.encode.torch_backend import load_backbone
from embedkit.encode.torch_head import SentenceHead
from embedkit.errors import InputError, RunFailure

EXPORTER = "torch.onnx.export (TorchScript tracer, dynamo=False), eager attention"


@dataclass(frozen=True)
class GraphInfo:
    """What the exported graph takes and gives, as recorded in `embedkit.json`."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    pooling: str
    normalize: bool
    dim: int
    num_attention_heads: int
    hidden_size: int
    opset: int


class SentenceEmbeddingGraph(torch.nn.Module):
    """Backbone + pooling, Dense and Normalize (+ L2 normalisation): the module that is traced."""

    def __init__(
        self, backbone: torch.nn.Module, modules: SentenceModules, normalize: bool, token_embeddings: bool
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = SentenceHead(modules)
        self.normalize = normalize
        self.token_embeddings = token_embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        hidden = self.backbone(**inputs).last_hidden_state  # (B, T, H)
        vectors = self.head(hidden, attention_mask, self.normalize)  # (B, D)
        return (vectors, hidden) if self.token_embeddings else (vectors,)


def check_architecture(config: dict) -> str:
    """The config's model_type if transformers builds its encoder here, else an `InputError` saying why.

    A model type transformers does not know needs the folder's own Python code
    (`trust_remote_code`), which embedkit never runs; an encoder-decoder has no single encoder
    output to pool.
    """
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    model_type = str(config.get("model_type", ""))
    if not model_type:
        raise InputError("cannot export: config.json has no model_type")
    if model_type not in MODEL_MAPPING_NAMES:
        raise InputError(
            f"cannot export model_type {model_type!r}: transformers {transformers.__version__} has no "
            "model of that type (embedkit does not run a model folder's own code)"
        )
    if config.get("is_encoder_decoder"):
        raise InputError(
            f"cannot export model_type {model_type!r}: an encoder-decoder is not a sentence encoder"
        )
    return model_type


def load_eager_backbone(model_dir: Path) -> torch.nn.Module:
    """The backbone with eager attention: the form the tracer turns into fusable MatMul/Softmax."""
    return load_backbone(model_dir, attn_implementation="eager").eval()


def takes_token_type_ids(backbone: torch.nn.Module) -> bool:
    """Same rule as TorchEncoder, so the graph is fed exactly what the reference was fed."""
    return "token_type_ids" in inspect.signature(backbone.forward).parameters


def export_graph(
    backbone: torch.nn.Module,
    path: Path,
    *,
    modules: SentenceModules,
    normalize: bool,
    opset: int,
    token_embeddings: bool = False,
) -> GraphInfo:
    """Trace `backbone` + `modules` (+ normalisation) to an ONNX file at `path`."""
    config = backbone.config
    # transformers 4.x and 5.x configs: BERT-likes name `hidden_size`/`num_attention_heads`,
    # DistilBERT `dim`/`n_heads`; a config without `vocab_size` gets ids every vocabulary has
    hidden_size = int(config.hidden_size if hasattr(config, "hidden_size") else config.dim)
    num_heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_heads", 0))
    input_names = ["input_ids", "attention_mask"]
    if takes_token_type_ids(backbone):
        input_names.append("token_type_ids")
    output_names = ["sentence_embedding"] + (["token_embeddings"] if token_embeddings else [])

    # Dummy shapes differ from each other and from 1, so the tracer cannot fold either axis.
    batch, seq = 2, 11
    vocab_size = int(getattr(config, "vocab_size", 2))
    dummy = {
        "input_ids": torch.arange(batch * seq, dtype=torch.long).reshape(batch, seq) % vocab_size,
        "attention_mask": torch.ones((batch, seq), dtype=torch.long),
        "token_type_ids": torch.zeros((batch, seq), dtype=torch.long),
    }
    dummy["attention_mask"][1, 7:] = 0
    args = tuple(dummy[name] for name in input_names)
    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in input_names}
    dynamic_axes["sentence_embedding"] = {0: "batch"}
    if token_embeddings:
        dynamic_axes["token_embeddings"] = {0: "batch", 1: "sequence"}

    wrapper = SentenceEmbeddingGraph(backbone, modules, normalize, token_embeddings).eval()
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        # The tracer warns about its own deprecation and about Python-side shape checks that it
        # records as constants; the dynamic-axes tests (batch 1/7, length 5/40) guard the result.
        warnings.simplefilter("ignore")
        what = f"{config.model_type} model"
        trace_graph(wrapper, args, path, input_names, output_names, dynamic_axes, opset, what)
    return GraphInfo(
        input_names=graph_inputs(path),
        output_names=tuple(output_names),
        pooling=modules.pooling_name,
        normalize=normalize,
        dim=modules.dim if modules.dense else len(modules.pooling) * hidden_size,
        num_attention_heads=num_heads,
        hidden_size=hidden_size,
        opset=opset,
    )


def graph_inputs(path: Path) -> tuple[str, ...]:
    """The inputs the traced graph kept: the tracer drops one the model never reads."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    return tuple(i.name for i in graph.input if i.name not in initializers)


def exporter_versions() -> dict[str, str]:
    """How the graph was made, for `embedkit.json`: fusions and parity depend on these versions."""
    import onnx
    import onnxruntime
    import transformers

    return {
        "method": EXPORTER,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


def trace_graph(
    module: torch.nn.Module,
    args: tuple,
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict,
    opset: int,
    what: str,
) -> None:
    """`module` traced by torch.onnx's TorchScript exporter into `path` (the caller silences its
    warnings); code the tracer cannot record is a `RunFailure` naming `what`."""
    try:
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    except Exception as exc:  # the tracer raises assorted errors on code it cannot record
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise RunFailure(f"torch.onnx cannot trace this {what}: {reason}") from None
