"""Old import path, kept for users' code: `OnnxEncoder` lives in `embedkit.encode.onnx_backend`."""

from embedkit.encode.onnx_backend import OnnxEncoder

__all__ = ["OnnxEncoder"]
