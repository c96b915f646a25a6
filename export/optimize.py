"""Graph optimization: onnxruntime's transformer fusions where they apply, its basic rewrites where not.

The fused operators (Attention, SkipLayerNormalization, BiasGelu, ...) are what makes the exported
graph faster than PyTorch on CPU and what the int8 quantizer turns into QAttention. Which of them
apply depends on the architecture, not on a list kept here: the fusion pass is run on every graph
and finds the subgraphs it knows (all of them on BERT-style attention; on MPNet, whose attention
adds a relative position bias, or on ModernBERT's rotary attention, only the layer norms and
activations). A graph it fuses nothing in gets onnxruntime's basic graph optimizations instead.

The plans are tried in `OPTIMIZATIONS` order and the export keeps the first whose graph passes
the fp32 parity gate, so a fusion that changed the numbers is never shipped. `embedkit.json`
records the plan and the fusion counts (MiniLM-L6: 6 Attention, 12 SkipLayerNormalization,
6 BiasGelu, 1 EmbedLayerNormalization; measured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from embedkit.errors import RunFailure
from embedkit.export.quiet import quiet

# The fused operators worth reporting; zero counts are dropped from the metadata.
FUSED_OPERATORS = (
    "EmbedLayerNormalization",
    "Attention",
    "MultiHeadAttention",
    "SkipLayerNormalization",
    "LayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization",
    "BiasGelu",
    "Gelu",
    "FastGelu",
    "RotaryEmbedding",
)

# Optimization plans, best first: what `embedkit.json` records under optimization.plan.
OPTIMIZATIONS = {
    "fusions": "onnxruntime transformer fusions (onnxruntime.transformers.optimizer, BERT pass)",
    "basic": "onnxruntime basic graph optimizations (constant folding, redundant nodes removed)",
    "none": "the traced graph as it is (--no-optimize)",
}


@dataclass
class OptimizedGraph:
    """One candidate fp32 graph: its plan, file and fused operator counts."""

    plan: str  # a key of OPTIMIZATIONS
    path: Path
    fusion: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the export's summary: the plan and what it fused."""
        if self.plan != "fusions":
            return OPTIMIZATIONS[self.plan]
        counts = ", ".join(f"{n} {op}" for op, n in self.fusion.items())
        attention = "" if self.fusion.get("Attention") else "; no Attention fused"
        return f"{OPTIMIZATIONS['fusions']}: {counts}{attention}"


def candidate_graphs(
    raw: Path, work: Path, *, optimize: bool, num_heads: int, hidden_size: int, say=None
) -> list[OptimizedGraph]:
    """The fp32 graphs to try, best first: fused (if anything fused), then basic; or the traced one."""
    if not optimize:
        return [OptimizedGraph("none", raw)]
    candidates = []
    fused = work / "fused.onnx"
    try:
        fusion = fuse_graph(raw, fused, num_heads=num_heads, hidden_size=hidden_size)
    except RunFailure as exc:
        fusion = {}
        if say:
            say(f"{exc}; using the basic graph optimizations")
    if fusion:
        candidates.append(OptimizedGraph("fusions", fused, fusion))
    basic = work / "basic.onnx"
    basic_graph(raw, basic)
    candidates.append(OptimizedGraph("basic", basic))
    return candidates


def fuse_graph(src: Path, dst: Path, *, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Fuse `src` into `dst` for CPU and GPU alike; return {fused operator: count}.

    `opt_level=0` applies only the Python fusions, not onnxruntime's own graph rewrites: those
    can add provider-specific nodes, while the fused graph must run on both CPU and CUDA. The
    runtime session applies onnxruntime's rewrites for the provider it actually has.
    """
    src, dst = Path(src).resolve(), Path(dst).resolve()  # the converters run in a scratch cwd
    from onnxruntime.transformers import optimizer

    try:
        with quiet():
            model = optimizer.optimize_model(
                str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, opt_level=0
            )
            stats = model.get_fused_operator_statistics()
            model.save_model_to_file(str(dst))
    except Exception as exc:  # the optimizer raises assorted errors on graphs it cannot parse
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunFailure(f"onnxruntime's transformer optimizer failed on the graph: {reason}") from None
    return {op: int(stats.get(op, 0)) for op in FUSED_OPERATORS if stats.get(op, 0)}


def basic_graph(src: Path, dst: Path) -> None:
    """Save `src` after onnxruntime's basic (provider-independent) graph optimizations to `dst`."""
    from embedkit.encode.ort_import import import_onnxruntime

    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(Path(dst).resolve())
    options.log_severity_level = 3
    try:
        ort.InferenceSession(
            str(Path(src).resolve()), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own exception types for graphs it refuses
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunFailure(f"onnxruntime cannot load the exported graph: {reason}") from None
