"""Truncating vectors to their first N dimensions, renormalized, against a row-by-row reference; the
sizes a model folder records."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from embedkit.encode.dimensions import truncate_vectors
from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError


def test_each_row_is_its_prefix_over_the_prefix_norm() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(5, 12)).astype(np.float32)
    vectors[:, :3] *= 10  # a prefix's norm far from the row's
    kept = truncate_vectors(vectors, 4)
    assert kept.shape == (5, 4) and kept.dtype == np.float32
    for row, out in zip(vectors.tolist(), kept.tolist(), strict=True):
        norm = math.sqrt(sum(x * x for x in row[:4]))
        assert out == pytest.approx([x / norm for x in row[:4]], rel=1e-6)
    assert truncate_vectors(vectors[0], 4) == pytest.approx(kept[0])
    np.testing.assert_allclose(
        truncate_vectors(vectors, 12), vectors / np.linalg.norm(vectors, axis=1)[:, None], rtol=1e-6
    )


def test_a_zero_prefix_stays_zero_and_the_input_is_kept() -> None:
    vectors = np.array([[0.0, 0.0, 1.0], [3.0, 4.0, 0.0]], dtype=np.float32)
    before = vectors.copy()
    np.testing.assert_allclose(truncate_vectors(vectors, 2), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)
    np.testing.assert_array_equal(vectors, before)


@pytest.mark.parametrize("dim", [0, 4, -1, 2.0, True])
def test_sizes_outside_the_vectors_are_refused(dim: object) -> None:
    with pytest.raises(InputError, match="cannot keep .* dimensions of 3-d vectors: use 1 to 3"):
        truncate_vectors(np.ones((2, 3)), dim)  # type: ignore[arg-type]


# --- what a model folder says of its sizes (`ModelSpec.matryoshka_dims`) -------------------------------


def with_metadata(tiny_bert: Path, folder: Path, meta: dict) -> Path:
    shutil.copytree(tiny_bert, folder)
    (folder / "embedkit.json").write_text(json.dumps(meta))
    return folder


def test_a_folder_reports_its_sizes_and_refuses_damaged_ones(tmp_path: Path, tiny_bert: Path) -> None:
    good = with_metadata(tiny_bert, tmp_path / "good", {"dim": 32, "matryoshka_dims": [32, 16, 8]})
    assert read_model_spec(good).matryoshka_dims == (32, 16, 8)
    assert read_model_spec(tiny_bert).matryoshka_dims == ()
    for n, bad in enumerate([[16, 32], [64, 32], [32, 32], [32, 0], [], "32", [32.0], [True]]):
        folder = with_metadata(tiny_bert, tmp_path / f"bad{n}", {"dim": 32, "matryoshka_dims": bad})
        with pytest.raises(InputError, match="'matryoshka_dims' must be distinct positive sizes"):
            read_model_spec(folder)


def test_an_export_keeps_the_sizes(tmp_path: Path, tiny_bert: Path) -> None:
    pytest.importorskip("onnxruntime")
    from embedkit.export import export_model

    source = with_metadata(tiny_bert, tmp_path / "trained", {"dim": 32, "matryoshka_dims": [32, 8]})
    result = export_model(source, tmp_path / "onnx", progress=False)
    assert result.metadata["matryoshka_dims"] == [32, 8]
    assert read_model_spec(result.out_dir).matryoshka_dims == (32, 8)
