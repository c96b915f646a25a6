"""What a sentence-transformers folder says about its text: prompts, lower-casing, truncation length.

Each is checked against `SentenceTransformer` itself loading the same folder (its `encode_query`,
`encode_document` and `encode`), through embedkit's torch encoder and the exported graph; settings
embedkit cannot reproduce are refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_models import make_tiny_encoder

st = pytest.importorskip("sentence_transformers")
pytest.importorskip("torch")

from embedkit.encode.identity import model_fingerprint  # noqa: E402
from embedkit.encode.model_folder import read_model_spec  # noqa: E402
from embedkit.encode.prefixes import Prefixes, detect_prefixes  # noqa: E402
from embedkit.encode.torch_backend import TorchEncoder  # noqa: E402
from embedkit.errors import InputError  # noqa: E402

TEXTS = ["The Wing FLOW at Mach 2", "boundary layer heat transfer", "a", "Shock waves on a Body"]
LONG = " ".join(["the boundary layer of the wing at high mach number"] * 8)


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("mpnet") / "m", "mpnet")


def with_settings(base: Path, folder: Path, st_config: dict | None = None, **sbert: object) -> Path:
    shutil.copytree(base, folder)
    if st_config is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    if sbert:
        path = folder / "sentence_bert_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **sbert}))
    return folder


def library(folder: Path):
    return st.SentenceTransformer(str(folder), device="cpu")


@pytest.mark.parametrize(
    ("st_config", "expected"),
    [
        ({"prompts": {"query": "q: ", "document": "d: "}}, ("q: ", "d: ")),
        ({"prompts": {"query": "q: ", "passage": "p: "}}, ("q: ", "p: ")),
        ({"prompts": {"query": "q: ", "corpus": "c: "}}, ("q: ", "c: ")),
        ({"prompts": {"document": "d: ", "passage": "p: "}}, ("", "d: ")),
        ({"prompts": {"query": "q: ", "sts": "s: "}, "default_prompt_name": "sts"}, ("q: ", "")),
    ],
)
def test_prompts_become_the_prefixes_sentence_transformers_uses(tmp_path, mpnet, st_config, expected):
    folder = with_settings(mpnet, tmp_path / "m", st_config)
    prefixes = detect_prefixes(folder)
    assert (prefixes.query, prefixes.passage) == expected
    assert prefixes.source == "config_sentence_transformers.json"
    model, ours = library(folder), TorchEncoder(folder, device="cpu")
    queries, passages = ours.encode(prefixes.queries(TEXTS)), ours.encode(prefixes.passages(TEXTS))
    np.testing.assert_allclose(queries, model.encode_query(TEXTS), atol=2e-6)
    np.testing.assert_allclose(passages, model.encode(TEXTS, prompt=expected[1]), atol=2e-6)
    if "document" in st_config["prompts"] or expected[1] == "":
        np.testing.assert_allclose(passages, model.encode_document(TEXTS), atol=2e-6)


def test_a_folder_without_prompts_has_no_prefixes(tmp_path, mpnet):
    assert detect_prefixes(
        with_settings(mpnet, tmp_path / "a", {"prompts": {"query": "", "document": ""}})
    ) == (Prefixes())
    assert (
        detect_prefixes(with_settings(mpnet, tmp_path / "b", {"prompts": {"clustering": "c: "}}))
        == Prefixes()
    )


def test_do_lower_case_is_applied_as_sentence_transformers_applies_it(tmp_path):
    # RoBERTa's byte-level BPE keeps case, so lower-casing changes its tokens.
    base = make_tiny_encoder(tmp_path / "base", "roberta")
    folder = with_settings(base, tmp_path / "lower", do_lower_case=True)
    reference = library(folder).encode(TEXTS)
    assert not np.allclose(reference, library(base).encode(TEXTS), atol=1e-4)  # the setting matters here
    np.testing.assert_allclose(TorchEncoder(folder, device="cpu").encode(TEXTS), reference, atol=2e-6)
    assert model_fingerprint(folder) != model_fingerprint(base)  # another model, for every index


def test_an_export_carries_the_prompts_and_lower_casing(tmp_path):
    pytest.importorskip("onnxruntime")
    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.export import export_model

    base = make_tiny_encoder(tmp_path / "base", "roberta", prompts={"query": "q: ", "document": "d: "})
    folder = with_settings(base, tmp_path / "lower", do_lower_case=True)
    out = export_model(folder, tmp_path / "onnx", progress=False).out_dir
    exported, source = detect_prefixes(out), detect_prefixes(folder)
    assert (exported.query, exported.passage) == (source.query, source.passage) == ("q: ", "d: ")
    model = library(folder)
    np.testing.assert_allclose(OnnxEncoder(out, device="cpu").encode(TEXTS), model.encode(TEXTS), atol=2e-5)
    assert model_fingerprint(out) == model_fingerprint(folder)


def test_a_sentence_transformers_6_folder_truncates_at_its_tokenizers_length(tmp_path, mpnet):
    """Its saves keep the length in tokenizer_config.json, not in sentence_bert_config.json."""
    folder = with_settings(mpnet, tmp_path / "st6")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"transformer_task": "feature-extraction"}))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 16}))
    assert read_model_spec(folder).max_seq_length == 16
    texts = [LONG, *TEXTS]
    np.testing.assert_allclose(
        TorchEncoder(folder, device="cpu").encode(texts), library(folder).encode(texts), atol=2e-6
    )


def test_mpnet_positions_count_from_the_padding_index(tmp_path, mpnet):
    config = json.loads((mpnet / "config.json").read_text())
    folder = with_settings(mpnet, tmp_path / "m", max_seq_length=config["max_position_embeddings"])
    with pytest.raises(InputError, match=r"max_seq_length \d+ exceeds the model's \d+ position embeddings"):
        read_model_spec(folder)


@pytest.mark.parametrize(
    ("where", "setting", "message"),
    [
        ("pooling", {"include_prompt": False}, "leaves the prompt's tokens out"),
        ("sbert", {"transformer_task": "fill-mask"}, "transformer_task 'fill-mask' is not supported"),
        (
            "sbert",
            {"config_kwargs": {"num_hidden_layers": 1}},
            "config_kwargs 'num_hidden_layers' is not supported",
        ),
        ("sbert", {"query_length": 32}, "query_length 32 is not supported"),
        ("sbert", {"modality_config": {"text": {"method_output_name": "pooler_output"}}}, "'pooler_output'"),
    ],
)
def test_settings_embedkit_cannot_reproduce_are_refused_in_one_line(tmp_path, mpnet, where, setting, message):
    folder = with_settings(mpnet, tmp_path / "m", **(setting if where == "sbert" else {}))
    if where == "pooling":
        path = folder / "1_Pooling" / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **setting}))
    with pytest.raises(InputError, match=message) as info:
        read_model_spec(folder)
    assert "\n" not in str(info.value)


def test_loading_arguments_that_change_nothing_are_accepted(tmp_path, mpnet):
    folder = with_settings(mpnet, tmp_path / "m", model_args={"torch_dtype": "float32"}, tokenizer_args={})
    assert read_model_spec(folder).model_type == "mpnet"
