"""Alternatives to the shipped int8 graph: weight-only 8-bit MatMulNBits, and static QDQ int8.

    .venv/bin/python benchmarks/int8_variants.py --onnx DIR [--unfused DIR2] [--threads 2]

For an `embedkit export --int8` folder: builds MatMulNBits variants of its fp32 graph (8-bit
symmetric weights in blocks of 32 or 128 along the input axis, accuracy_level 4 = int8 compute),
each also with the fused Attention dynamically quantized to QAttention. With `--unfused` (an
`embedkit export --no-optimize` folder of the same model), also static QDQ int8 of its MatMuls
(per-channel weights, activation ranges calibrated with MinMax on 256 other benchmark sentences).
Prints each graph's min and mean cosine to the fp32 graph's vectors and its sentences/s beside
fp32 and the shipped int8 graph (the sentences of encode.py, interleaved passes, median).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from encode import BATCH_SIZE, benchmark_texts, time_backends  # noqa: E402

from embedkit.export.quiet import quiet  # noqa: E402


def build_variants(onnx_dir: Path, work: Path) -> dict[str, Path]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    variants: dict[str, Path] = {}
    for block in (32, 128):
        model = onnx.load(str(onnx_dir / "model.onnx"))
        quantizer = MatMulNBitsQuantizer(model, bits=8, block_size=block, is_symmetric=True, accuracy_level=4)
        with quiet():
            quantizer.process()
        plain = work / f"nbits8-b{block}.onnx"
        quantizer.model.save_model_to_file(str(plain), use_external_data_format=False)
        variants[f"MatMulNBits 8-bit, block {block}"] = plain
        with_attention = work / f"nbits8-b{block}-qattention.onnx"
        with quiet():  # the converters' debug copies land in a scratch folder, not the caller's
            quantize_dynamic(
                str(plain),
                str(with_attention),
                op_types_to_quantize=["Attention"],
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
        variants[f"MatMulNBits 8-bit, block {block}, QAttention"] = with_attention
    return variants


def build_static_qdq(unfused_dir: Path, encoder, work: Path) -> Path:  # encoder: OnnxEncoder
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    batches = list(encoder.batcher.batches(benchmark_texts(256, seed=1), 32))

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.remaining = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.remaining, None)
            if batch is None:
                return None
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            if "token_type_ids" in encoder.input_names:
                feeds["token_type_ids"] = batch.token_type_ids
            return feeds

    prepared, out = work / "unfused-prepared.onnx", work / "static-qdq.onnx"
    with quiet():
        quant_pre_process(str(unfused_dir / "model.onnx"), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(out),
            Batches(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, required=True, help="An `embedkit export --int8` folder.")
    parser.add_argument(
        "--unfused", type=Path, help="An `embedkit export --no-optimize` folder: adds static QDQ."
    )
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # quiet() runs the converters in a scratch folder: every path they are given must be absolute.
    args.onnx = args.onnx.resolve()
    args.unfused = args.unfused.resolve() if args.unfused is not None else None

    import onnxruntime as ort

    from embedkit.encode.onnx_backend import OnnxEncoder, session_options

    texts = benchmark_texts(args.sentences)
    encoders = {
        name: OnnxEncoder(args.onnx, device="cpu", precision=precision, intra_op_threads=args.threads)
        for name, precision in (("fp32", "fp32"), ("int8 (shipped)", "int8"))
    }
    with tempfile.TemporaryDirectory(prefix="embedkit-int8-") as work:
        files = build_variants(args.onnx, Path(work))
        if args.unfused is not None:
            files["static QDQ int8 (MatMul, MinMax)"] = build_static_qdq(
                args.unfused, encoders["fp32"], Path(work)
            )
        for name, file in files.items():
            encoder = OnnxEncoder(args.onnx, device="cpu", precision="fp32", intra_op_threads=args.threads)
            options = session_options(args.threads)
            encoder.session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
            encoders[name] = encoder
    reference = encoders["fp32"].encode(texts)
    backends: dict[str, Callable[[list[str]], np.ndarray]] = {
        name: (lambda t, e=encoder: e.encode(t, batch_size=BATCH_SIZE)) for name, encoder in encoders.items()
    }
    seconds = time_backends(backends, texts, args.repeats)
    print(f"{len(texts)} texts, batch {BATCH_SIZE}, median of {args.repeats} passes")
    print(f"{'graph':<44} {'sent/s':>8} {'x fp32':>7} {'min cos':>8} {'mean cos':>8}")
    for name, encoder in encoders.items():
        cosines = np.sum(encoder.encode(texts) * reference, axis=1)
        rate = len(texts) / seconds[name]
        ratio = seconds["fp32"] / seconds[name]
        print(f"{name:<44} {rate:>8.1f} {ratio:>7.2f} {cosines.min():>8.4f} {cosines.mean():>8.4f}")


if __name__ == "__main__":
    main()
