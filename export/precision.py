"""Reduced-precision variants of the fp32 graph: float16 (for GPUs) and dynamic int8 (for CPUs).

Each precision has a short ladder of plans, from fastest to most conservative. The pipeline
tries them in order and keeps the first one whose parity passes its gate, recording the plan
in `embedkit.json`, so "what was kept in float32, and why" is never a guess.

- fp16: the pooling and normalisation always stay float32 (a sum over up to 512 tokens and a
  squared norm can leave float16's range on models with large activations); the second plan
  also keeps every LayerNorm in float32, the known float16 overflow in BERT-style encoders.
- int8: dynamic quantization with per-channel uint8 weights (`INT8_WEIGHTS`). Measured on
  MiniLM-L6 against PyTorch: per-tensor weights give mean cosine 0.94 (min 0.81), per-channel
  0.989 (min 0.960) at the same speed. Later plans keep the layers most sensitive to 8-bit
  activations in float32.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.errors import RunFailure
from embedkit.export.quiet import quiet

LAYERNORM_OPS = (
    "LayerNormalization",
    "SkipLayerNormalization",
    "EmbedLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization",
)

# The tracer names nodes by module path ("/backbone/encoder/layer.0/..."); nodes written by the
# export wrapper itself (pooling, normalisation) sit at the top level: "/ReduceSum", "/Div_1".
_WRAPPER_NODE = re.compile(r"^/[^/]+$")


@dataclass(frozen=True)
class Fp16Plan:
    name: str
    keep_fp32_ops: tuple[str, ...]  # operator types left in float32, beside the pooling nodes


FP16_PLANS = (
    Fp16Plan("pooling-fp32", ()),
    Fp16Plan("layernorm-fp32", LAYERNORM_OPS),
)


def wrapper_node_names(model) -> list[str]:  # model: onnx.ModelProto
    """Names of the pooling/normalisation nodes that the export wrapper added after the backbone."""
    return [node.name for node in model.graph.node if _WRAPPER_NODE.match(node.name)]


def convert_fp16(src: Path, dst: Path, plan: Fp16Plan) -> list[str]:
    """Write a float16 copy of `src` to `dst` with float32 inputs and outputs; return kept node names."""
    src, dst = Path(src).resolve(), Path(dst).resolve()  # the converters run in a scratch cwd
    import onnx
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = OnnxModel(onnx.load(str(src)))
    keep_nodes = wrapper_node_names(model.model)
    keep_ops = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(plan.keep_fp32_ops))
    try:
        with quiet():
            model.convert_float_to_float16(
                keep_io_types=True, op_block_list=keep_ops, node_block_list=keep_nodes
            )
        _drop_repeated_casts(model.model)
        _unique_node_names(model.model)
        model.save_model_to_file(str(dst))
    except Exception as exc:  # the converter raises assorted errors on graphs it cannot type
        raise RunFailure(f"float16 conversion failed: {exc}") from None
    kept = [n.name for n in model.model.graph.node if n.name in keep_nodes or n.op_type in plan.keep_fp32_ops]
    return kept


def _drop_repeated_casts(model) -> None:  # model: onnx.ModelProto
    """Remove each Cast that repeats an earlier one: same input, same target type, same output.

    onnxruntime 1.31's converter (the newest onnxruntime-gpu on PyPI at the time of writing; 1.32
    fixed it) inserts one Cast per float32-kept reader of a float16 tensor, every one defining the
    same output name, and ONNX Runtime then refuses the graph ("Duplicate definition of name").
    """
    producers: dict[str, Any] = {}
    repeats: list[int] = []
    for index, node in enumerate(model.graph.node):
        earlier = producers.get(node.output[0]) if len(node.output) == 1 else None
        if (
            node.op_type == "Cast"
            and earlier is not None
            and earlier.op_type == "Cast"
            and list(earlier.input) == list(node.input)
            and _attributes(earlier) == _attributes(node)
        ):
            repeats.append(index)
            continue
        for name in node.output:
            producers.setdefault(name, node)
    for index in reversed(repeats):
        del model.graph.node[index]
    if repeats:
        names = [info.name for info in model.graph.value_info]
        for index in reversed(range(len(names))):
            if names.index(names[index]) < index:
                del model.graph.value_info[index]


def _attributes(node) -> list[bytes]:
    return [attribute.SerializeToString() for attribute in node.attribute]


def _unique_node_names(model) -> None:  # model: onnx.ModelProto
    """Rename repeated node names, which ONNX Runtime refuses to load.

    Seen with onnxruntime 1.30's converter: the Cast it inserts for an initializer shared by two
    float32-kept nodes gets the same name twice ("two nodes with same node name").
    """
    seen: set[str] = set()
    for node in model.graph.node:
        if node.name and node.name in seen:
            suffix = 1
            while f"{node.name}_{suffix}" in seen:
                suffix += 1
            node.name = f"{node.name}_{suffix}"
        seen.add(node.name)


@dataclass(frozen=True)
class Int8Weights:
    """How the weights are stored; activations are always quantized to uint8 at run time."""

    weight_type: str  # onnxruntime's QuantType name: "QInt8" (u8 x s8 products) or "QUInt8" (u8 x u8)
    reduce_range: bool  # 7-bit weights: no u8 x s8 pair sum can leave int16
    per_channel: bool = True


# uint8 weights: u8 x u8 products, which no x86 CPU saturates. ONNX Runtime computes u8 x s8
# (int8 weights) with VPMADDUBSW on CPUs without VNNI, whose int16 pair sums saturate (its
# quantization docs: "When and why do I need to try U8U8?"): there the same file gave other
# vectors, min cosine 0.929 on a tiny ModernBERT (gate 0.95) against 0.9999 without saturation.
# Measured on such a CPU (benchmarks/int8_saturation.py; figures in docs/models.md), uint8 weights
# give the highest (or equal) min and mean cosine of the saturation-free settings everywhere;
# 7-bit int8 weights (`reduce_range`) run as fast as int8 but lose on MiniLM-L6 (min 0.9558, 0.9638).
INT8_WEIGHTS = Int8Weights("QUInt8", reduce_range=False)


@dataclass(frozen=True)
class Int8Plan:
    name: str
    excludes: Callable[[str, str], bool]  # (node name, op type) -> keep this node in float32


def _is_embedding(name: str, op: str) -> bool:
    return op == "EmbedLayerNormalization" or "/embeddings/" in name


def _is_ffn_output(name: str, op: str) -> bool:
    # BERT/RoBERTa: layer.N/output/dense (not attention/output/dense); DistilBERT: ffn/lin2.
    return (
        ("/output/dense/" in name and "/attention/" not in name) or "/ffn/lin2/" in name
    ) and op == "MatMul"


def _is_ffn_input(name: str, op: str) -> bool:
    return ("/intermediate/dense/" in name or "/ffn/lin1/" in name) and op == "MatMul"


INT8_PLANS = (
    Int8Plan("all-per-channel", lambda name, op: False),
    Int8Plan("embeddings-fp32", _is_embedding),
    Int8Plan("embeddings-ffn-output-fp32", lambda n, o: _is_embedding(n, o) or _is_ffn_output(n, o)),
    Int8Plan(
        "embeddings-ffn-fp32", lambda n, o: _is_embedding(n, o) or _is_ffn_output(n, o) or _is_ffn_input(n, o)
    ),
)


def prepare_for_quantization(src: Path, dst: Path) -> str:
    """Run onnxruntime's quantization pre-processing (shape inference the quantizer needs).

    The fused graph's com.microsoft operators hide the MatMul outputs' types from ONNX shape
    inference; without this step `quantize_dynamic` refuses the graph (seen on MiniLM-L6).
    Symbolic shape inference is tried first; where it fails (seen with onnxruntime 1.30 on a
    graph it had not fused), ONNX shape inference alone. Returns which one ran.
    """
    src, dst = Path(src).resolve(), Path(dst).resolve()  # the converters run in a scratch cwd
    from onnxruntime.quantization.shape_inference import quant_pre_process

    errors = []
    for method, skip_symbolic in (("symbolic", False), ("onnx", True)):
        try:
            with quiet():
                quant_pre_process(str(src), str(dst), skip_symbolic_shape=skip_symbolic)
            return method
        except Exception as exc:  # shape inference raises assorted errors
            errors.append(f"{method}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    raise RunFailure(f"int8 pre-processing (shape inference) failed: {'; '.join(errors)}")


def quantize_int8(src: Path, dst: Path, plan: Int8Plan, weights: Int8Weights = INT8_WEIGHTS) -> list[str]:
    """Dynamically quantize `src` (already pre-processed) to `dst`; return the names kept float32."""
    src, dst = Path(src).resolve(), Path(dst).resolve()  # the converters run in a scratch cwd
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src), load_external_data=False)
    excluded = [node.name for node in model.graph.node if plan.excludes(node.name, node.op_type)]
    try:
        with quiet():
            quantize_dynamic(
                str(src),
                str(dst),
                per_channel=weights.per_channel,
                reduce_range=weights.reduce_range,
                weight_type=QuantType[weights.weight_type],
                nodes_to_exclude=excluded,
            )
    except Exception as exc:  # the quantizer raises assorted errors on graphs it cannot type
        raise RunFailure(f"int8 quantization failed: {str(exc).splitlines()[0]}") from None
    return excluded
