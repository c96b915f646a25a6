"""Re-embedding an index keeps the fusion it searched with, and never calibrates with the new model.

Reference: the fusion record the first build wrote (a calibration stood in by a fixed one), and an
index built without one. The new model's vectors are checked too, so the re-embed is not a no-op.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from embedkit import SearchIndex, build_index
from embedkit.encode.loading import load_encoder
from embedkit.encode.runtime import Runtime
from embedkit.index.folder import read_index_meta
from embedkit.jobs.index_options import IndexOptions
from embedkit.jobs.index_reembed import reembed_index
from embedkit.search.request import Calibration

DOCS = [
    f"{w} flow over the {v} wing at mach {i}"
    for i, (w, v) in enumerate(
        [("shock", "swept"), ("laminar", "delta"), ("turbulent", "thin"), ("viscous", "flat")]
    )
]
RECORD = Calibration(
    "minmax", 0.6, "a fixed record of this test", {"dense": {"ict": 50.0}}, {"ict": 40}, 4, 4
)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(DOCS)))
    return path


@pytest.fixture
def other_model(tmp_path, tiny_bert):
    """The tiny model with other weights: a stand-in for an adapted one."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "adapted"
    shutil.copytree(tiny_bert, folder)
    weights = load_file(str(folder / "model.safetensors"))
    rng = np.random.default_rng(1)
    save_file(
        {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in weights.items()},
        str(folder / "model.safetensors"),
    )
    return folder


def test_reembed_keeps_the_recorded_fusion_and_calibrates_nothing(
    tmp_path, tiny_bert, other_model, corpus, monkeypatch
):
    import embedkit.jobs.index_build as calibrate

    monkeypatch.setattr(calibrate, "calibrate_version", lambda *a, **k: RECORD)
    build_index(corpus, tmp_path / "idx", tiny_bert)
    before = read_index_meta(tmp_path / "idx")["fusion"]
    assert before == RECORD.to_json()

    def refuse(*args, **kwargs):
        raise AssertionError("a re-embed calibrated with the new model")

    monkeypatch.setattr(calibrate, "calibrate_version", refuse)
    reembed_index(tmp_path / "idx", other_model, runtime=Runtime(device="cpu"))
    meta = read_index_meta(tmp_path / "idx")
    assert meta["fusion"] == before
    want = load_encoder(other_model, device="cpu").encode(DOCS, normalize=True)
    with SearchIndex.load(tmp_path / "idx") as index:
        np.testing.assert_allclose(index.rows.vectors([0, 1, 2, 3]), want, atol=1e-5)


def test_reembed_of_an_index_without_a_calibration_keeps_the_default(
    tmp_path, tiny_bert, other_model, corpus, monkeypatch
):
    import embedkit.jobs.index_build as calibrate

    build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(calibrate=False))
    assert not read_index_meta(tmp_path / "idx").get("fusion")
    monkeypatch.setattr(calibrate, "calibrate_version", lambda *a, **k: RECORD)  # would be recorded
    reembed_index(tmp_path / "idx", other_model, runtime=Runtime(device="cpu"))
    assert not read_index_meta(tmp_path / "idx").get("fusion")
