"""Which int8 weight setting is right on every x86 CPU: parity of each, per architecture.

    .venv/bin/python benchmarks/int8_saturation.py [--architectures bert,modernbert] [--no-minilm]
    .venv/bin/python benchmarks/int8_saturation.py --speed   # also sentences/s on all-MiniLM-L6-v2

ONNX Runtime's u8 x s8 int8 products (dynamic quantization's default: uint8 activations, int8
weights) use VPMADDUBSW on x86 CPUs without VNNI, whose pair sums saturate at int16 (its
quantization docs: "When and why do I need to try U8U8?"). Each setting below quantizes the same
fused fp32 graph, with every plan of `embedkit.export.precision.INT8_PLANS` in turn until one
passes the int8 gate (as `embedkit export --int8` does), and prints min and mean cosine with
sentence-transformers' vectors on the export's 300 built-in parity sentences, and the min on the
architecture test's texts (gate there: 0.95):

- `QInt8`: full-range int8 weights, as run on this CPU;
- `QInt8, no saturation`: the same file run with onnxruntime's session option
  `session.x64quantprecision`, which turns its u8 x s8 products into u8 x u8 on CPUs without VNNI,
  i.e. the figures a CPU with VNNI gets from that file;
- `QInt8, reduce_range`: 7-bit weights, whose pair sums (at most 2 x 255 x 64) fit int16;
- `QUInt8`: uint8 weights, u8 x u8 products, which do not saturate.

The models: one tiny random model per architecture of `tests/export/test_architectures.py` (its
pooling and heads), and the bundled all-MiniLM-L6-v2 (a real one).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT / "tests" / "export")]

from embedkit.export.precision import Int8Weights  # noqa: E402


@dataclass(frozen=True)
class Setting:
    name: str
    weights: Int8Weights
    no_saturation_session: bool = False  # run with session.x64quantprecision


BATCHES = {"builtin": 64, "test": 4}
SETTINGS = (
    Setting("QInt8", Int8Weights("QInt8", reduce_range=False)),
    Setting("QInt8, no saturation", Int8Weights("QInt8", reduce_range=False), no_saturation_session=True),
    Setting("QInt8, reduce_range", Int8Weights("QInt8", reduce_range=True)),
    Setting("QUInt8", Int8Weights("QUInt8", reduce_range=False)),
)


def tiny_models(work: Path, architectures: list[str]) -> dict[str, Path]:
    from test_architectures import HEADS
    from tiny_models import make_tiny_encoder

    return {
        name: make_tiny_encoder(work / name / "model", name, pooling=HEADS[name][0], dense=HEADS[name][1])
        for name in architectures
    }


def fp32_export(model: Path, out: Path) -> Path:
    """The fused fp32 export, with `model_int8.onnx` named in its metadata for the settings to fill."""
    from embedkit.export import export_model

    export_model(model, out, progress=False)
    meta_path = out / "embedkit.json"
    meta = json.loads(meta_path.read_text())
    meta["files"]["int8"] = "model_int8.onnx"
    meta_path.write_text(json.dumps(meta))
    return out


def int8_encoder(folder: Path, setting: Setting, threads: int | None):  # -> OnnxEncoder
    import onnxruntime as ort

    from embedkit.encode.onnx_backend import OnnxEncoder, session_options

    encoder = OnnxEncoder(folder, device="cpu", precision="int8", intra_op_threads=threads)
    if setting.no_saturation_session:
        options = session_options(threads)
        options.add_session_config_entry("session.x64quantprecision", "1")
        encoder.session = ort.InferenceSession(
            str(folder / "model_int8.onnx"), options, providers=["CPUExecutionProvider"]
        )
    return encoder


def measure(
    folder: Path,
    prepared: Path,
    reference: dict[str, np.ndarray],
    texts: dict[str, list[str]],
    setting: Setting,
    threads: int | None,
) -> dict[str, object]:
    """The first plan that passes the gate on the built-in sentences, with its figures (or the last)."""
    from embedkit.export.parity import ParityGates
    from embedkit.export.precision import INT8_PLANS, quantize_int8

    gates = ParityGates()
    for plan in INT8_PLANS:
        quantize_int8(prepared, folder / "model_int8.onnx", plan, setting.weights)
        encoder = int8_encoder(folder, setting, threads)
        cosines = {
            # batch sizes as the gate (64) and the test (4) use: activations are scaled per batch
            name: np.sum(encoder.encode(batch, batch_size=BATCHES[name]) * reference[name], axis=1)
            for name, batch in texts.items()
        }
        builtin = cosines["builtin"]
        row = {
            "plan": plan.name,
            "min": float(builtin.min()),
            "mean": float(builtin.mean()),
            "test_min": float(cosines["test"].min()),
        }
        if row["min"] >= gates.int8_min_cosine and row["mean"] >= gates.int8_mean_cosine:
            return {**row, "passed": True}
    return {**row, "passed": False}


def measure_model(name: str, model: Path, work: Path, threads: int | None) -> dict[str, dict[str, object]]:
    from sentence_transformers import SentenceTransformer
    from test_architectures import TEXTS

    from embedkit.encode.model_folder import read_model_spec
    from embedkit.export.parity import builtin_sentences
    from embedkit.export.precision import prepare_for_quantization

    folder = fp32_export(model, work / f"{name}-onnx")
    texts = {"builtin": builtin_sentences(read_model_spec(model).max_seq_length), "test": TEXTS}
    st = SentenceTransformer(str(model), device="cpu")
    reference = {
        key: st.encode(batch, convert_to_numpy=True, normalize_embeddings=True)
        for key, batch in texts.items()
    }
    prepared = work / f"{name}-prepared.onnx"
    prepare_for_quantization(folder / "model.onnx", prepared)
    return {s.name: measure(folder, prepared, reference, texts, s, threads) for s in SETTINGS}


def speed(folder: Path, prepared: Path, threads: int | None, repeats: int) -> dict[str, float]:
    """sentences/s of each setting's all-per-channel graph on the encode benchmark's sentences."""
    from encode import BATCH_SIZE, benchmark_texts, time_backends

    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.export.precision import INT8_PLANS, quantize_int8

    texts = benchmark_texts(640)
    backends = {"fp32": OnnxEncoder(folder, device="cpu", precision="fp32", intra_op_threads=threads)}
    for setting in SETTINGS:
        target = folder / f"model_int8_{len(backends)}.onnx"
        quantize_int8(prepared, target, INT8_PLANS[0], setting.weights)
        (folder / "model_int8.onnx").unlink(missing_ok=True)
        (folder / "model_int8.onnx").symlink_to(target.name)
        backends[setting.name] = int8_encoder(folder, setting, threads)
    seconds = time_backends(
        {name: (lambda t, e=enc: e.encode(t, batch_size=BATCH_SIZE)) for name, enc in backends.items()},
        texts,
        repeats,
    )
    return {name: len(texts) / value for name, value in seconds.items()}


def main() -> None:
    from test_architectures import HEADS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architectures", default=",".join(HEADS))
    parser.add_argument("--no-minilm", action="store_true", help="Skip the bundled all-MiniLM-L6-v2.")
    parser.add_argument("--speed", action="store_true", help="Also time each setting on all-MiniLM-L6-v2.")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, help="The shared data folder, where not ../shared/data.")
    args = parser.parse_args()
    if args.data is not None:
        import encode

        encode.DATA = args.data.resolve()

    from embedkit.encode.model_folder import default_base_model_path

    with tempfile.TemporaryDirectory(prefix="embedkit-int8-") as scratch:
        work = Path(scratch)
        models = tiny_models(work, [a for a in args.architectures.split(",") if a])
        if not args.no_minilm:
            models["all-MiniLM-L6-v2"] = default_base_model_path()
        print(
            f"{'model':<18} {'setting':<22} {'plan (first to pass)':<28} {'min':>7} {'mean':>7} "
            f"{'test min':>8}  gate"
        )
        for name, model in models.items():
            for setting, row in measure_model(name, model, work, args.threads).items():
                print(
                    f"{name:<18} {setting:<22} {row['plan']:<28} {row['min']:>7.4f} {row['mean']:>7.4f} "
                    f"{row['test_min']:>8.4f}  {'pass' if row['passed'] else 'FAIL'}",
                    flush=True,
                )
        if args.speed:
            folder = work / "all-MiniLM-L6-v2-onnx"
            if not folder.is_dir():
                fp32_export(default_base_model_path(), folder)
            prepared = work / "all-MiniLM-L6-v2-prepared.onnx"
            if not prepared.is_file():
                from embedkit.export.precision import prepare_for_quantization

                prepare_for_quantization(folder / "model.onnx", prepared)
            rates = speed(folder, prepared, args.threads, args.repeats)
            print(
                f"\nall-MiniLM-L6-v2, plan all-per-channel, 640 sentences, batch 64, median of {args.repeats}"
            )
            for name, rate in rates.items():
                print(f"{name:<22} {rate:>7.1f} sentences/s  {rate / rates['fp32']:.2f}x fp32")


if __name__ == "__main__":
    main()
