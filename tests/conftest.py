"""Shared fixtures: tiny random BERT model folders and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixture_text import AERO_WORDS, SENTENCES  # noqa: F401 (re-exported for tests)
from tiny_models import make_tiny_bert, make_tiny_cross_encoder

from embedkit.console_quiet import quiet_other_libraries

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# Real models that are not bundled (all-mpnet-base-v2, ...): folders under $EMBEDKIT_TEST_MODELS,
# else ../models beside the project; tests that need one skip when it is absent.
MODELS = Path(os.environ.get("EMBEDKIT_TEST_MODELS") or Path(__file__).resolve().parents[1].parent / "models")

# rich lays tables out at the terminal's width (COLUMNS, else 80), so the tests pin it: they read the
# same output in any terminal. Tests of other widths set COLUMNS themselves; subprocesses inherit it.
os.environ["COLUMNS"] = "80"
# As the CLI does: no transformers/hub progress bars, no gRPC exit chatter from Milvus Lite.
quiet_other_libraries()

@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (4 layers, 4 heads, hidden 32) with mean pooling and token_type_ids."""
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT cross-encoder as sentence-transformers' CrossEncoder.save writes it."""
    st = pytest.importorskip("sentence_transformers")
    root = tmp_path_factory.mktemp("tiny-cross-encoder")
    plain = make_tiny_cross_encoder(root / "hf", "bert", seed=1)
    st.CrossEncoder(str(plain), device="cpu").save(str(root / "st"))
    return root / "st"


@pytest.fixture(scope="session")
def still_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT without dropout: training on it is a deterministic function of the data."""
    return make_tiny_bert(tmp_path_factory.mktemp("still-bert"), dropout=0.0)


@pytest.fixture(scope="session")
def tiny_bert_no_types(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random DistilBERT: no token_type_ids input, cls pooling, no Normalize module."""
    return make_tiny_bert(
        tmp_path_factory.mktemp("tiny-distilbert"), architecture="distilbert", pooling="cls", normalize=False
    )


@pytest.fixture(scope="session")
def tiny_onnx(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random BERT exported to ONNX (fp32; max_seq_length 64, normalized in the graph)."""
    pytest.importorskip("onnxruntime")
    from embedkit.export import export_model

    return export_model(
        tiny_bert, tmp_path_factory.mktemp("serve-onnx") / "tiny-onnx", progress=False
    ).out_dir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` beside the project; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


@pytest.fixture(scope="session")
def mpnet_base() -> Path:
    """sentence-transformers' all-mpnet-base-v2 folder under `MODELS`; tests that need it skip without it."""
    folder = MODELS / "all-mpnet-base-v2"
    if not (folder / "model.safetensors").is_file():
        pytest.skip(f"all-mpnet-base-v2 is not at {folder} (set EMBEDKIT_TEST_MODELS to its parent folder)")
    return folder


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The bundled all-MiniLM-L6-v2 folder."""
    from embedkit.encode.model_folder import default_base_model_path

    return default_base_model_path()


@pytest.fixture
def sentences() -> list[str]:
    return list(SENTENCES)


@pytest.fixture
def one_thread():
    """Tiny models run faster on one torch thread, and the machine is shared."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
