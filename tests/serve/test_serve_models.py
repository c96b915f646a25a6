"""Several models in one server: each answers with its own vectors, equal to those it gives served
alone, chosen by the OpenAI `model` field; /v1/models lists them; a name not served is a 404."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from serve_helpers import in_process
from tiny_models import make_tiny_bert

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from embedkit.serve.settings import ServeConfig  # noqa: E402

TEXTS = ["the wing flow is high", "a man is playing guitar on the beach", "one", "heat transfer at mach five"]


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny BERT (other weights, other name), served as a torch folder."""
    return make_tiny_bert(tmp_path_factory.mktemp("second") / "second-bert", seed=7, hidden_size=48)


def _vectors(client, texts, model=None) -> np.ndarray:
    body = {"input": texts, **({"model": model} if model is not None else {})}
    response = client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    assert model is None or response.json()["model"] == model
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


@pytest.fixture(scope="module")
def alone(tiny_onnx: Path, second: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Each model served alone: its name and its vectors of TEXTS."""
    found = {}
    for key, folder in (("first", tiny_onnx), ("second", second)):
        with in_process(ServeConfig(model=str(folder), max_wait_ms=0)) as client:
            name = client.get("/v1/models").json()["data"][0]["id"]
            found[key] = (name, _vectors(client, TEXTS))
    return found


@pytest.fixture(scope="module")
def both(tiny_onnx: Path, tiny_index: Path, second: Path):
    config = ServeConfig(
        model=str(tiny_onnx), index=str(tiny_index), extra_models=(str(second),), max_wait_ms=0
    )
    with in_process(config) as client:
        yield client


def test_each_model_answers_with_its_own_vectors(both, alone):
    (first_name, first_alone), (second_name, second_alone) = alone["first"], alone["second"]
    assert first_name != second_name and first_alone.shape[1] != second_alone.shape[1]
    np.testing.assert_allclose(_vectors(both, TEXTS, first_name), first_alone, atol=1e-6)
    np.testing.assert_allclose(_vectors(both, TEXTS, second_name), second_alone, atol=1e-6)
    np.testing.assert_allclose(_vectors(both, TEXTS), first_alone, atol=1e-6)  # no name: the first


def test_concurrent_requests_to_both_models_each_get_their_own(both, alone):
    from concurrent.futures import ThreadPoolExecutor

    names = [alone["first"][0], alone["second"][0]] * 4
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda name: (name, _vectors(both, TEXTS, name)), names))
    expected = dict(alone.values())
    for name, vectors in answers:
        np.testing.assert_allclose(vectors, expected[name], atol=1e-6)


def test_models_lists_every_served_model_first_one_first(both, alone):
    data = both.get("/v1/models").json()["data"]
    assert [card["id"] for card in data] == [alone["first"][0], alone["second"][0]]
    assert [card["index"] for card in data] == [True, False]
    assert [card["dim"] for card in data] == [alone["first"][1].shape[1], alone["second"][1].shape[1]]


def test_a_model_not_served_is_a_404_naming_the_served_ones(both, alone):
    response = both.post("/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["param"] == "model" and repr(alone["second"][0]) in error["message"]


def test_two_models_of_one_name_fail_to_load(tiny_onnx: Path):
    with in_process(
        ServeConfig(model=str(tiny_onnx), extra_models=(str(tiny_onnx),), max_wait_ms=0)
    ) as client:
        health = client.get("/health")
    assert health.status_code == 503 and "two served models are named" in health.json()["message"]


def test_serve_refuses_a_second_model_that_is_not_a_folder(tiny_onnx: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(
        app, ["serve", "--model", str(tiny_onnx), "--model", str(missing), "--port", "0"]
    )
    assert result.exit_code == 2, result.output
    assert "model folder not found" in result.output and str(missing) in result.output


def test_info_and_metrics_describe_each_model(tiny_onnx: Path, second: Path, alone):
    parser = pytest.importorskip("prometheus_client.parser")
    (first_name, _), (second_name, _) = alone["first"], alone["second"]
    config = ServeConfig(model=str(tiny_onnx), extra_models=(str(second),), max_wait_ms=0)
    with in_process(config) as client:
        _vectors(client, TEXTS, first_name)
        _vectors(client, TEXTS[:3], second_name)
        _vectors(client, TEXTS[:3], second_name)
        models = client.get("/info").json()["embedkit"]["models"]
        text = client.get("/metrics").text
    assert [m["name"] for m in models] == [first_name, second_name]
    assert [m["backend"] for m in models] == ["onnx", "torch"]
    # the weight files each runs from, read here independently of the server
    assert models[0]["weights_bytes"] == (tiny_onnx / "model.onnx").stat().st_size
    assert models[1]["weights_bytes"] == (second / "model.safetensors").stat().st_size
    assert all(m["batches"] >= 2 and m["mean_batch_seconds"] > 0 for m in models)  # the warm-up and more
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    memory = {s.labels["model"]: s.value for s in families["embedkit_model_memory_bytes"].samples}
    assert memory == {m["name"]: m["memory_bytes"] for m in models}
    # the torch model's float32 weights were read into memory: its growth holds at least them
    assert models[1]["memory_bytes"] >= models[1]["weights_bytes"] > 0
    texts = {s.labels["model"]: s.value for s in families["embedkit_model_texts_embedded"].samples}
    assert texts == {first_name: 4, second_name: 6}
    counts = {
        s.labels["model"]: s.value
        for s in families["embedkit_model_batch_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert counts == {m["name"]: m["batches"] for m in models}


@pytest.fixture(scope="module")
def second_index(second: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server tests' corpus indexed with the second model."""
    import json

    from serve_helpers import CORPUS

    from embedkit import build_index
    from embedkit.jobs.index_options import IndexOptions

    folder = tmp_path_factory.mktemp("second-index")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(record) + "\n" for record in CORPUS), encoding="utf-8")
    return build_index(corpus, folder / "index", model=second, options=IndexOptions(device="cpu")).path


def _hits(client, model=None) -> list[tuple[str, float]]:
    body = {"query": "shock wave on the wing", "k": 5, "mode": "dense", **({"model": model} if model else {})}
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    return [(h["id"], h["score"]) for h in response.json()["results"][0]["hits"]]


def test_each_index_is_searched_with_its_own_model(tiny_onnx, tiny_index, second_index, alone):
    (first_name, _), (second_name, _) = alone["first"], alone["second"]
    expected = {}
    for name, index in ((first_name, tiny_index), (second_name, second_index)):
        with in_process(ServeConfig(index=str(index), max_wait_ms=0)) as client:
            expected[name] = _hits(client)
    assert [i for i, _ in expected[first_name]] != [i for i, _ in expected[second_name]] or (
        [s for _, s in expected[first_name]] != [s for _, s in expected[second_name]]
    )
    config = ServeConfig(index=str(tiny_index), extra_indexes=(str(second_index),), max_wait_ms=0)
    with in_process(config) as client:
        assert _hits(client, second_name) == expected[second_name]
        assert _hits(client, first_name) == expected[first_name] == _hits(client)
        cards = client.get("/v1/models").json()["data"]
    assert [(c["id"], c["index"]) for c in cards] == [(first_name, True), (second_name, True)]


def _unit(vectors) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_tei_clients_pick_a_model_by_its_base_url(both, alone):
    """TEI serves one model a server, so its clients choose a model by URL: /models/NAME is the
    base URL of model NAME (POST to it, /embed and /info under it); the plain routes are the first's."""
    (first_name, first_alone), (second_name, second_alone) = alone["first"], alone["second"]
    for path in (f"/models/{second_name}/embed", f"/models/{second_name}"):
        response = both.post(path, json={"inputs": TEXTS})
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(response.json(), _unit(second_alone), atol=1e-6)
    first = both.post(f"/models/{first_name}/embed", json={"inputs": TEXTS}).json()
    np.testing.assert_allclose(first, _unit(first_alone), atol=1e-6)
    np.testing.assert_allclose(both.post("/embed", json={"inputs": TEXTS}).json(), first, atol=0)
    info = both.get(f"/models/{second_name}/info").json()
    assert info["model_id"] == second_name and both.get("/info").json()["model_id"] == first_name
    missing = both.post("/models/text-embedding-3-small/embed", json={"inputs": "x"})
    assert missing.status_code == 404 and missing.json()["error_type"] == "NotFound"
    assert repr(second_name) in missing.json()["error"]
    assert both.get("/models/text-embedding-3-small/info").status_code == 404
