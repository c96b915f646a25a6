"""Export to ONNX (torch + onnx): trace, optimize, fp16/int8, parity check.

`export_model` is the entry point; importing this package stays light (torch, transformers and
onnxruntime load when an export starts).
"""

from embedkit.export.parity import ParityFailure, ParityGates, ParityReport, builtin_sentences
from embedkit.export.pipeline import ExportResult, export_model

__all__ = [
    "ExportResult",
    "ParityFailure",
    "ParityGates",
    "ParityReport",
    "builtin_sentences",
    "export_model",
]
