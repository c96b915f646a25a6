"""Graph optimization: onnxruntime's transformer fusions (Attention, SkipLayerNorm, BiasGelu, ...).

The fused operators are what makes the exported graph faster than PyTorch on CPU and what the
int8 quantizer turns into QAttention. The fusion counts are recorded in `embedkit.json`, so a
user can see whether a model was fully fused (MiniLM-L6: 6 Attention, 12 SkipLayerNormalization,
6 BiasGelu, 1 EmbedLayerNormalization; measured).
"""

from __future__ import annotations

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
    "BiasGelu",
    "Gelu",
    "FastGelu",
)


def optimize_graph(src: Path, dst: Path, *, num_heads: int, hidden_size: int) -> dict[str, int]:
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
        raise RunFailure(f"onnxruntime's optimizer failed on the exported graph: {exc}") from None
    return {op: int(stats.get(op, 0)) for op in FUSED_OPERATORS if stats.get(op, 0)}
