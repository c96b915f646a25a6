"""A cross-encoder folder to an ONNX folder whose scores are checked against torch before it is written.

The graph is the `*ForSequenceClassification` model traced from the token ids to its one logit a
pair; the activation stays outside it (`embedkit.encode.cross_encoder.activate`), so `raw_scores`
can give the logit. The gate: the logits of pairs of the built-in sentences (each with the next
one; every length up to the model's), ONNX Runtime (basic graph optimizations, as every session
opens) against torch, the largest difference at most `MAX_LOGIT_DIFFERENCE`. Only fp32: no
precision ladder exists for scores yet. `embedkit.json` records the kind, the activation, the
length and the gate's figures; the tokenizer files, `config.json` and the sentence-transformers
config are copied beside the graph.
"""

from __future__ import annotations

import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embedkit import __version__
from embedkit.encode.cross_encoder import CrossEncoderModel
from embedkit.encode.identity import TOKENIZER_FILES
from embedkit.errors import RunFailure
from embedkit.export.onnx_graph import trace_graph
from embedkit.export.parity import builtin_sentences
from embedkit.storage.atomic import atomic_dir, write_json_atomic

# The largest logit difference the fp32 graph may show against torch: float32 rounding through a
# transformer stays near 1e-6 of a logit; 1e-4 leaves room for other kernels, none for an error.
MAX_LOGIT_DIFFERENCE = 1e-4
PAIRS = 200  # pairs of built-in sentences the gate scores
_CARRIED = ("config.json", "config_sentence_transformers.json", "README.md", "LICENSE", *TOKENIZER_FILES)


@dataclass(frozen=True)
class CrossEncoderExport:
    out_dir: Path
    pairs: int
    max_logit_difference: float


class _LogitGraph(torch.nn.Module):
    """The classifier's one logit a pair, [batch]."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        names = ("input_ids", "attention_mask", "token_type_ids")[: len(inputs)]
        return self.model(**dict(zip(names, inputs, strict=True))).logits.reshape(-1)


def export_cross_encoder(model_dir: str | Path, out: str | Path, opset: int = 17) -> CrossEncoderExport:
    """Trace, gate and write the ONNX folder; a `RunFailure` (nothing written) when the gate fails."""
    scorer = CrossEncoderModel(model_dir, device="cpu")
    spec = scorer.spec
    texts = builtin_sentences(spec.max_length, count=PAIRS + 1)
    pairs = list(zip(texts[:-1], texts[1:], strict=True))
    with atomic_dir(Path(out)) as folder:
        inputs = _trace(scorer, folder / "model.onnx", opset)
        for name in _CARRIED:
            if (spec.path / name).is_file():
                shutil.copy2(spec.path / name, folder / name)
        expected = scorer.score_pairs(pairs, raw=True)
        onnx = CrossEncoderModel.from_graph(folder, spec)
        difference = float(np.max(np.abs(onnx.score_pairs(pairs, raw=True) - expected)))
        if not difference <= MAX_LOGIT_DIFFERENCE:
            raise RunFailure(
                f"the ONNX graph's logits differ from torch's by up to {difference:.2e} on "
                f"{len(pairs)} pairs (the gate is {MAX_LOGIT_DIFFERENCE:.0e}): nothing was written"
            )
        write_json_atomic(folder / "embedkit.json", _record(spec, inputs, opset, len(pairs), difference))
    return CrossEncoderExport(Path(out), len(pairs), difference)


def _trace(scorer: CrossEncoderModel, path: Path, opset: int) -> tuple[str, ...]:
    """The graph of `scorer`'s model at `path`; the input names it takes."""
    model = scorer.torch_model
    names = ["input_ids", "attention_mask"]
    batch = scorer.tokenizer(
        ["a wing", "the flow of air"], ["lift", "drag on a body"], padding=True, return_tensors="pt"
    )
    if "token_type_ids" in batch:
        names.append("token_type_ids")
    dynamic = {name: {0: "batch", 1: "sequence"} for name in names} | {"logit": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's own deprecation and constant-shape notes
        args = tuple(batch[name] for name in names)
        trace_graph(_LogitGraph(model).eval(), args, path, names, ["logit"], dynamic, opset, "cross-encoder")
    return tuple(names)


def _record(spec: Any, inputs: tuple[str, ...], opset: int, pairs: int, difference: float) -> dict[str, Any]:
    return {
        "kind": "cross-encoder",
        "architecture": spec.architecture,
        "activation": spec.activation,
        "max_length": spec.max_length,
        "input_names": list(inputs),
        "opset": opset,
        "optimization": {"applied": "onnxruntime's basic graph optimizations, at session load"},
        "parity": {"pairs": pairs, "max_logit_difference": difference, "gate": MAX_LOGIT_DIFFERENCE},
        "embedkit_version": __version__,
    }
