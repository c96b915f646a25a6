"""Fixed shapes: the buckets by hand, padding that changes no vector on any pooling mode, and the
number of shapes an ONNX session meets over a varied workload."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from embedkit.encode.shapes import ShapePlan, length_buckets, row_buckets

pytest.importorskip("onnxruntime")

TEXTS = [
    "the wing flow",
    "boundary layer heat transfer at high mach number on a slender cone",
    "a",
    "the patient eats food and the dog runs on the beach with a man playing guitar",
    "shock",
    "heat transfer to a flat plate in hypersonic flow with a sharp leading edge",
    "the court ruled",
]


@pytest.fixture(scope="module")
def tiny_onnx(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random BERT exported to ONNX (fp32; max_seq_length 64)."""
    from embedkit.export import export_model

    return export_model(tiny_bert, tmp_path_factory.mktemp("shapes") / "onnx", progress=False).out_dir


def test_buckets_by_hand():
    assert length_buckets(256) == (16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256)
    assert length_buckets(100) == (16, 32, 48, 64, 80, 96, 100)
    assert length_buckets(8) == (8,)
    assert row_buckets(64) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert row_buckets(100) == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100)
    assert row_buckets(1) == (1,) and row_buckets(5) == (1, 2, 3, 4, 5)
    plan = ShapePlan(256)
    assert [plan.length(n) for n in (1, 16, 17, 128, 129, 250)] == [16, 16, 32, 128, 160, 256]
    assert [plan.rows(n, 64) for n in (1, 5, 7, 13, 33, 49, 64)] == [1, 6, 8, 16, 48, 64, 64]
    assert plan.rows(70, 100) == 96 and plan.rows(97, 100) == 100
    with pytest.raises(ValueError):
        plan.rows(65, 64)
    exact = ShapePlan(256, fixed=False)
    assert (exact.length(17), exact.rows(13, 64), exact.shapes(64)) == (17, 13, [])
    shapes = ShapePlan(64).shapes(8, max_tokens=128)
    assert (1, 64) in shapes and (2, 64) in shapes and (3, 64) not in shapes and (8, 16) in shapes
    sizes = [rows * length for rows, length in shapes]
    assert sizes == sorted(sizes, reverse=True)  # largest first: memory grows to its peak at once


def onnx_model(base: Path, folder: Path, pooling: str | list[str]) -> Path:
    """The tiny BERT with a sentence-transformers Pooling in `pooling` mode and a Dense, exported."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer, models

    from embedkit.export import export_model

    torch.manual_seed(1)
    transformer = models.Transformer(str(base))
    pool = models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    dense = models.Dense(in_features=pool.get_embedding_dimension(), out_features=8)
    SentenceTransformer(modules=[transformer, pool, dense], device="cpu").save(str(folder / "st"))
    return export_model(folder / "st", folder / "onnx", fp16=False, int8=False, progress=False).out_dir


class ShapeRecorder:
    """An InferenceSession stand-in that records the shape of every batch it runs."""

    def __init__(self, session) -> None:
        self.session = session
        self.shapes: list[tuple[int, int]] = []
        self.ahead: list[bool] = []  # whether a tokenizing worker thread was alive during each run

    def run(self, outputs, feeds):
        self.shapes.append(tuple(feeds["input_ids"].shape))
        self.ahead.append(any(t.name.startswith("embedkit-tokenize") for t in threading.enumerate()))
        return self.session.run(outputs, feeds)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.mark.parametrize(
    "pooling",
    ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ["cls", "mean"]],
)
def test_padding_to_fixed_shapes_changes_no_vector(tmp_path, tiny_bert, pooling):
    from embedkit.encode.onnx_backend import OnnxEncoder

    folder = onnx_model(tiny_bert, tmp_path, pooling)
    # The reference: each text alone, in a batch of one row at its own length (no padding at all),
    # with the graph's raw vectors (no normalisation to hide a change in length).
    exact = OnnxEncoder(folder, device="cpu", fixed_shapes=False)
    recorder = ShapeRecorder(exact.session)
    exact.session = recorder
    alone = np.stack([exact.encode([text], batch_size=1)[0] for text in TEXTS])
    lengths = [len(exact.batcher.tokenizer.encode(t).ids) for t in TEXTS]
    assert sorted(width for _, width in recorder.shapes) == sorted(lengths)

    fixed = OnnxEncoder(folder, device="cpu", fixed_shapes=True)
    padded = ShapeRecorder(fixed.session)
    fixed.session = padded
    together = fixed.encode(TEXTS, batch_size=5)
    # 7 texts in batches of 5, longest first: 5 rows, then 2; each padded to a multiple of 16
    longest = sorted(lengths, reverse=True)
    assert longest[0] % 16 and longest[5] % 16  # both batches are padded in length

    def by16(n: int) -> int:
        return -(-n // 16) * 16

    assert padded.shapes == [(5, by16(longest[0])), (2, by16(longest[5]))]
    odd = fixed.encode(TEXTS[2:5], batch_size=4)  # 3 rows of a batch of 4: no padded row
    assert padded.shapes[-1] == (3, by16(max(lengths[2:5])))
    five = fixed.encode(TEXTS[:5], batch_size=8)  # 5 rows padded to 6: one empty row, dropped
    assert padded.shapes[-1] == (6, by16(max(lengths[:5]))) and five.shape == (5, 8)
    for ours, reference in ((together, alone), (odd, alone[2:5]), (five, alone[:5])):
        norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
        cosine = np.sum(ours * reference, 1) / norms
        assert cosine.min() > 1 - 1e-6, (pooling, cosine)
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5)


def varied_texts(rng: random.Random, count: int) -> list[str]:
    words = ["flow", "wing", "shock", "layer", "heat", "plate", "cone", "mach", "drag", "lift", "edge"]
    return [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 90))) for _ in range(count)]


def test_a_session_meets_few_shapes_over_a_varied_workload(tiny_onnx):
    from embedkit.encode.onnx_backend import OnnxEncoder

    rng = random.Random(7)
    calls = [(varied_texts(rng, rng.randrange(1, 120)), rng.choice((1, 8, 32, 64))) for _ in range(40)]
    seen = {}
    for fixed in (False, True):
        encoder = OnnxEncoder(tiny_onnx, device="cpu", fixed_shapes=fixed)
        recorder = ShapeRecorder(encoder.session)
        encoder.session = recorder
        for texts, batch_size in calls:
            encoder.encode(texts, batch_size=batch_size)
        seen[fixed] = set(recorder.shapes)
    plan = ShapePlan(64)  # the tiny export's max_seq_length
    allowed = {shape for _, batch_size in calls for shape in plan.shapes(batch_size)}
    assert seen[True] <= allowed
    # the bound from the buckets: 4 lengths, and rows from each batch size's ladder
    bound = len(length_buckets(64)) * len({r for _, b in calls for r in row_buckets(b)})
    assert len(seen[True]) <= bound == 4 * 12
    assert len(seen[False]) > 3 * len(seen[True])  # the same workload in exact shapes: many more


def test_warmup_runs_every_shape_so_encode_meets_no_new_one(tiny_onnx, monkeypatch):
    from embedkit.encode import batching, onnx_backend
    from embedkit.encode.shapes import WARMUP_ROWS

    real = onnx_backend.create_session
    recorders = []

    def on_cuda(file, device="auto", intra_op_threads=None, spinning=True, cuda_options=None):
        # The CPU session, reported as running on CUDA: the device check decides the defaults.
        session, _ = real(file, "cpu", intra_op_threads, spinning)
        recorders.append(ShapeRecorder(session))
        return recorders[-1], "cuda"

    monkeypatch.setattr(onnx_backend, "create_session", on_cuda)
    # no CUDA buffers on this machine: the run stage's NumPy path, with the CUDA defaults
    monkeypatch.setattr(onnx_backend, "open_runner", lambda *args: None)
    monkeypatch.setattr(batching, "FIXED_SHAPE_CHUNK_TEXTS", 32)  # several chunks: workers tokenize ahead
    encoder = onnx_backend.OnnxEncoder(tiny_onnx)
    assert encoder.device == "cuda" and encoder.shapes.fixed and encoder.warmup is not None
    warmed = set(recorders[-1].shapes)
    assert encoder.warmup.shapes == len(warmed) == len(row_buckets(WARMUP_ROWS)) * len(length_buckets(64))
    recorders[-1].shapes.clear()
    rng = random.Random(3)
    for _ in range(10):
        encoder.encode(varied_texts(rng, rng.randrange(1, 150)), batch_size=rng.choice((16, 64)))
    assert set(recorders[-1].shapes) <= warmed
    assert any(recorders[-1].ahead)  # on CUDA the next batches are prepared in a worker thread

    off = onnx_backend.OnnxEncoder(tiny_onnx, warmup=False)
    assert off.shapes.fixed and off.warmup is None and not recorders[-1].shapes
    monkeypatch.setattr(onnx_backend, "create_session", real)
    cpu = onnx_backend.OnnxEncoder(tiny_onnx, device="cpu")
    assert not cpu.shapes.fixed and cpu.warmup is None
    cpu.session = ShapeRecorder(cpu.session)
    cpu.encode(varied_texts(rng, 150), batch_size=16)
    assert cpu.session.shapes and not any(cpu.session.ahead)  # on the CPU: no worker thread
