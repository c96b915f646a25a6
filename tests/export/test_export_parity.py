"""Parity math and gates on plain arrays (no model needed)."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from embedkit.errors import InputError
from embedkit.export.parity import ParityGates, builtin_sentences, judge, read_calibration, row_cosines


def test_row_cosines_match_a_loop():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(20, 7)).astype(np.float32)
    b = a + 0.3 * rng.normal(size=(20, 7)).astype(np.float32)
    expected = [
        float(x @ y) / (math.sqrt(float(x @ x)) * math.sqrt(float(y @ y))) for x, y in zip(a, b, strict=True)
    ]
    np.testing.assert_allclose(row_cosines(a, b), expected, rtol=1e-6)


def test_row_cosines_zero_row_and_shape_errors():
    a = np.array([[0.0, 0.0], [1.0, 0.0]])
    b = np.array([[1.0, 0.0], [-2.0, 0.0]])
    np.testing.assert_allclose(row_cosines(a, b), [0.0, -1.0])
    with pytest.raises(InputError, match="two \\[n, dim\\] arrays of one shape"):
        row_cosines(a, b[:1])


def test_fp32_gate_is_min_cosine():
    texts = ["a", "b", "c"]
    gates = ParityGates()
    passed = judge("fp32", np.array([1.0, 0.999995, 1.0]), texts, gates)
    assert passed.passed and passed.min_cosine == pytest.approx(0.999995)
    failed = judge("fp32", np.array([1.0, 0.99998, 1.0]), texts, gates)
    assert not failed.passed and failed.worst_sentence == "b"
    assert "(gate: min >= 0.99999)" in failed.summary()


def test_int8_gate_needs_mean_and_min():
    texts = [str(i) for i in range(4)]
    gates = ParityGates()
    assert judge("int8", np.array([0.99, 0.99, 0.99, 0.96]), texts, gates).passed
    # mean 0.9825 passes, min 0.94 does not
    assert not judge("int8", np.array([1.0, 1.0, 0.99, 0.94]), texts, gates).passed
    # min 0.96 passes, mean 0.97 does not
    assert not judge("int8", np.array([0.97, 0.97, 0.98, 0.96]), texts, gates).passed


def test_int8_sts_drop_gate():
    texts = ["x", "y"]
    cos = np.array([0.99, 0.99])
    ok = judge("int8", cos, texts, ParityGates(), sts_spearman=81.2, fp32_sts_spearman=82.0)
    assert ok.passed
    bad = judge("int8", cos, texts, ParityGates(), sts_spearman=80.9, fp32_sts_spearman=82.0)
    assert not bad.passed and bad.gate == "mean >= 0.98, min >= 0.95, STS >= 81.00 (fp32 - 1.0)"


def test_nan_never_passes():
    assert not judge("fp16", np.array([np.nan, 1.0]), ["a", "b"], ParityGates()).passed


def test_judge_rejects_unknown_precision_and_empty_input():
    with pytest.raises(InputError, match="unknown precision 'bf16'"):
        judge("bf16", np.array([1.0]), ["a"], ParityGates())
    with pytest.raises(InputError, match="one cosine per sentence"):
        judge("fp32", np.array([]), [], ParityGates())


def test_builtin_sentences_are_varied_and_deterministic():
    texts = builtin_sentences(256)
    assert texts == builtin_sentences(256)
    assert len(texts) == 300 and len(set(texts)) > 280
    words = [len(t.split()) for t in texts]
    assert min(words) == 0 and max(words) > 256  # the empty string up to truncation
    assert sum(w <= 16 for w in words) > 100  # most sentences short, as in real use
    assert any(not t.isascii() for t in texts)
    assert any(any(c.isdigit() for c in t) for t in texts)
    assert any("?" in t or "!" in t for t in texts)
    assert max(len(t.split()) for t in builtin_sentences(32)) < 64


def test_read_calibration(tmp_path: Path):
    plain = tmp_path / "cal.txt"
    plain.write_text("first line\n\n  second line  \n", encoding="utf-8")
    assert read_calibration(plain) == ["first line", "second line"]
    packed = tmp_path / "cal.txt.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as fh:
        fh.write("zipped\n")
    assert read_calibration(packed) == ["zipped"]
    with pytest.raises(InputError, match="calibration file not found"):
        read_calibration(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="has no sentences"):
        read_calibration(empty)
    binary = tmp_path / "bad.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="cannot read calibration file"):
        read_calibration(binary)
