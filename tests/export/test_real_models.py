"""Real models that are not bundled, where present (`mpnet_base`: ../models or $EMBEDKIT_TEST_MODELS).

Slow: each exports a 110M-parameter model and checks every precision against sentence-transformers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixture_text import SENTENCES

pytest.importorskip("onnxruntime")
pytest.importorskip("sentence_transformers")

from embedkit.encode.onnx_backend import OnnxEncoder  # noqa: E402
from embedkit.encode.torch_backend import TorchEncoder  # noqa: E402
from embedkit.export import export_model  # noqa: E402


@pytest.mark.slow
def test_all_mpnet_base_v2_exports_at_every_precision(tmp_path: Path, mpnet_base: Path):
    from sentence_transformers import SentenceTransformer

    result = export_model(
        mpnet_base, tmp_path / "mpnet-onnx", fp16=True, int8=True, progress=False, device="cpu"
    )
    meta = result.metadata
    assert (meta["model_type"], meta["dim"], meta["max_seq_length"]) == ("mpnet", 768, 384)
    assert meta["input_names"] == ["input_ids", "attention_mask"]
    # MPNet's attention adds a relative position bias: the layer norms and GELUs fuse, Attention not
    assert meta["optimization"]["plan"] == "fusions" and "Attention" not in meta["fusion"]
    assert meta["fusion"] == {"SkipLayerNormalization": 25, "BiasGelu": 12}
    assert all(r.passed for r in result.reports) and [r.precision for r in result.reports] == [
        "fp32",
        "fp16",
        "int8",
    ]
    reference = SentenceTransformer(str(mpnet_base), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(TorchEncoder(mpnet_base, device="cpu").encode(SENTENCES), reference, atol=2e-6)
    np.testing.assert_allclose(
        OnnxEncoder(result.out_dir, device="cpu").encode(SENTENCES), reference, atol=2e-5
    )
