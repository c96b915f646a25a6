"""Cross-encoders: scores against sentence-transformers' `CrossEncoder.predict` on the same tiny random
model, as sentence-transformers 6 saves it and as a plain Hugging Face folder; folders whose scores
embedkit cannot reproduce refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_tiny_cross_encoder

st = pytest.importorskip("sentence_transformers")
torch = pytest.importorskip("torch")

from embedkit.encode.cross_encoder import CrossEncoderModel, read_cross_encoder  # noqa: E402
from embedkit.errors import InputError  # noqa: E402

QUERY = "shock wave drag on the wing"
TEXTS = [
    "shock wave on the wing at high mach number",
    "heat transfer in the boundary layer",
    "the cat eats food on the beach",
    "pressure and drag of a small body " * 8,  # cut at the model's 48 tokens, as CrossEncoder cuts it
    "the patient was given a drug for the disease",
    "a man is playing guitar",
    "",
]


@pytest.fixture(scope="module", params=["bert", "mpnet", "roberta"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny cross-encoder as sentence-transformers' CrossEncoder.save writes it."""
    root = tmp_path_factory.mktemp(f"ce-{request.param}")
    plain = make_tiny_cross_encoder(root / "hf", request.param)
    st.CrossEncoder(str(plain), device="cpu").save(str(root / "st"))
    return root / "st"


def test_scores_are_cross_encoder_predict(saved):
    reference = st.CrossEncoder(str(saved), device="cpu")
    expected = reference.predict([(QUERY, t) for t in TEXTS], batch_size=3)
    model = CrossEncoderModel(saved, device="cpu", batch_size=3)
    scores = model.score(QUERY, TEXTS)
    assert np.ptp(expected) > 0.05  # the tiny model tells the texts apart: the check can fail
    np.testing.assert_allclose(scores, expected, atol=2e-6)
    raw = reference.predict([(QUERY, t) for t in TEXTS], activation_fn=torch.nn.Identity())
    np.testing.assert_allclose(model.score(QUERY, TEXTS, raw=True), raw, atol=2e-5)


def test_a_plain_hugging_face_folder_scores_with_the_sigmoid(tmp_path):
    plain = make_tiny_cross_encoder(tmp_path / "hf", "bert", seed=3)
    expected = st.CrossEncoder(str(plain), device="cpu").predict([(QUERY, t) for t in TEXTS])
    np.testing.assert_allclose(
        CrossEncoderModel(plain, device="cpu").score(QUERY, TEXTS), expected, atol=2e-6
    )
    assert read_cross_encoder(plain).activation == "sigmoid"


def test_a_recorded_identity_activation_gives_the_logits(tmp_path):
    plain = make_tiny_cross_encoder(tmp_path / "hf", "bert", seed=4)
    reference = st.CrossEncoder(str(plain), device="cpu", activation_fn=torch.nn.Identity())
    reference.save(str(tmp_path / "st"))
    expected = st.CrossEncoder(str(tmp_path / "st"), device="cpu").predict([(QUERY, t) for t in TEXTS])
    assert read_cross_encoder(tmp_path / "st").activation == "identity"
    scores = CrossEncoderModel(tmp_path / "st", device="cpu").score(QUERY, TEXTS)
    np.testing.assert_allclose(scores, expected, atol=2e-5)
    assert scores.min() < 0 or scores.max() > 1  # logits, not probabilities


def test_an_embedding_model_is_refused(tiny_bert):
    with pytest.raises(InputError, match="not a cross-encoder"):
        read_cross_encoder(tiny_bert)


def test_several_labels_are_refused(tmp_path):
    folder = make_tiny_cross_encoder(tmp_path / "nli", "bert", num_labels=3)
    with pytest.raises(InputError, match="scores 3 labels"):
        read_cross_encoder(folder)


def test_an_activation_it_cannot_reproduce_is_refused(tmp_path):
    folder = make_tiny_cross_encoder(tmp_path / "hf", "bert")
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"activation_fn": "torch.nn.modules.activation.Tanh"})
    )
    with pytest.raises(
        InputError, match="activation 'torch.nn.modules.activation.Tanh' cannot be reproduced"
    ):
        read_cross_encoder(folder)
