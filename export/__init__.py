"""Export to ONNX (torch + onnx): export, optimize, fp16/int8, parity check."""
