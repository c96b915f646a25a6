"""text-embeddings-inference's routes and /openapi.json, on `embedkit serve` as a real process.

TEI's clients are the reference for its routes (huggingface_hub's InferenceClient); the encoder's
own `encode` for the vectors; jsonschema and openapi-spec-validator for the description, every
documented response of every route checked against it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

from serve_helpers import Server, serving  # noqa: E402

KEY = "tei-key-7"
MAX_TEXTS = 8
MAX_BODY_BYTES = 16 * 1024
TEXTS = ["the wing flow is high", "a man is playing guitar on the beach", "one"]
LONG = " ".join(["pressure"] * 200)  # far over the tiny model's 64 tokens


@pytest.fixture(scope="module")
def server(tiny_onnx: Path, tiny_index: Path, tiny_cross_encoder: Path):
    args = [str(tiny_onnx), "--index", str(tiny_index), "--api-key", KEY, "--max-texts", str(MAX_TEXTS)]
    args += ["--rerank", str(tiny_cross_encoder)]
    with serving([*args, "--max-body-mb", str(MAX_BODY_BYTES / 2**20), "--max-wait-ms", "1"]) as process:
        yield process


@pytest.fixture(scope="module")
def encoder(tiny_onnx_encoder):
    return tiny_onnx_encoder


@pytest.fixture
def client(server: Server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
        yield c


def test_huggingface_inference_client_gets_the_encoders_vectors(server: Server, encoder, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    # CI runs with HF_HUB_OFFLINE=1 (no model hub), which also blocks the client's requests to this
    # local server: offline mode is lifted for this test alone.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub.constants, "is_offline_mode", lambda: False)
    api = hub.InferenceClient(base_url=server.url, api_key=KEY)
    many = np.asarray(api.feature_extraction(TEXTS))
    assert many.shape == (len(TEXTS), encoder.dim)
    np.testing.assert_allclose(many, encoder.encode(TEXTS), atol=1e-5)
    # a served model's own base URL, /models/NAME, is a TEI server of that model for the client
    by_name = hub.InferenceClient(base_url=f"{server.url}/models/{encoder.path.name}", api_key=KEY)
    np.testing.assert_allclose(np.asarray(by_name.feature_extraction(TEXTS)), many, atol=0)
    one = np.asarray(api.feature_extraction("the cat eats food"))
    np.testing.assert_allclose(one.reshape(-1), encoder.encode(["the cat eats food"])[0], atol=1e-5)
    with pytest.raises(hub.errors.HfHubHTTPError) as caught:
        hub.InferenceClient(base_url=server.url, api_key="wrong").feature_extraction("x")
    assert caught.value.response.status_code == 401


def test_embed_follows_teis_shapes(client, encoder):
    got = client.post("/embed", json={"inputs": TEXTS})
    assert got.status_code == 200, got.text
    np.testing.assert_allclose(np.array(got.json()), encoder.encode(TEXTS), atol=1e-5)
    # TEI answers an input over max_input_length without truncate with 413, error_type Validation
    too_long = client.post("/embed", json={"inputs": ["short", LONG]})
    assert too_long.status_code == 413
    assert too_long.json()["error_type"] == "Validation" and "inputs[1]" in too_long.json()["error"]
    cut = client.post("/embed", json={"inputs": LONG, "truncate": True})
    assert cut.status_code == 200
    np.testing.assert_allclose(np.array(cut.json()), encoder.encode([LONG]), atol=1e-5)
    empty = client.post("/embed", json={"inputs": []})
    assert (empty.status_code, empty.json()["error_type"]) == (400, "Empty")
    # the tiny model normalizes inside its graph: raw vectors cannot be had
    raw = client.post("/embed", json={"inputs": "x", "normalize": False})
    assert raw.status_code == 422 and "normalize" in raw.json()["error"]
    bad = client.post("/embed", json={"inputs": "x", "truncate": "yes"})
    assert bad.status_code == 422 and "'truncate'" in bad.json()["error"]


def test_info_has_teis_fields(client, tiny_bert: Path):
    info = client.get("/info").json()
    assert info["model_id"] == tiny_bert.name  # the export is named after its source
    assert (info["max_input_length"], info["max_client_batch_size"]) == (64, MAX_TEXTS)
    assert info["model_dtype"] == "float32" and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["auto_truncate"] is False
    # what the server runs with on a CPU: the measured CPU sizing, exact shapes, no warm-up
    runtime = info["embedkit"]
    assert (runtime["device"], runtime["max_batch_tokens"], runtime["batches_in_flight"]) == ("cpu", 4096, 1)
    assert info["max_batch_tokens"] == 4096 and runtime["shapes"]["fixed"] is False
    assert runtime["warmup"] == {"enabled": False, "shapes": 0, "seconds": 0.0}


# ---- /openapi.json ---------------------------------------------------------------------------


def validator_for(document: dict, content_schema: dict):
    """A validator of one response body, resolving the document's `#/components/...` references."""
    root = {"$schema": "https://json-schema.org/draft/2020-12/schema", **content_schema}
    root["components"] = document["components"]
    return jsonschema.Draft202012Validator(root)


def check_against(document: dict, method: str, path: str, response: httpx.Response) -> None:
    spec = document["paths"][path][method]["responses"]
    status = str(response.status_code)
    assert status in spec, f"{method} {path} answered {status}, not documented: {response.text[:200]}"
    ((media, content),) = spec[status]["content"].items()
    if media != "application/json":
        assert response.headers["content-type"].startswith(media)
        return
    validator_for(document, content["schema"]).validate(response.json())


def live_calls() -> list[tuple[str, str, dict, int]]:
    """(method, path, httpx arguments, expected status) for every documented live answer."""
    no_key = {"headers": {"Authorization": "Bearer nope"}}
    over = {"json": {"input": ["a"] * (MAX_TEXTS + 1)}}
    return [
        ("post", "/v1/embeddings", {"json": {"input": TEXTS}}, 200),
        ("post", "/v1/embeddings", {"json": {"input": TEXTS, "encoding_format": "base64"}}, 200),
        ("post", "/v1/embeddings", {"content": b"[1, 2]"}, 400),
        ("post", "/v1/embeddings", {"json": {"input": "x"}, **no_key}, 401),
        ("post", "/v1/embeddings", over, 413),
        ("post", "/v1/embeddings", {"json": {"input": 3}}, 422),
        ("post", "/search", {"json": {"query": "shock wave", "k": 3, "mode": "hybrid"}}, 200),
        ("post", "/search", {"json": {"queries": ["shock wave", "cat"], "k": 2}}, 200),
        ("post", "/search", {"content": b"{"}, 400),
        ("post", "/search", {"json": {"query": "x"}, **no_key}, 401),
        ("post", "/search", {"json": {"queries": ["q"] * (MAX_TEXTS + 1)}}, 413),
        ("post", "/search", {"json": {"query": "x", "k": 0}}, 422),
        ("get", "/v1/models", {}, 200),
        ("get", "/v1/models", no_key, 401),
        ("get", "/health", {}, 200),
        ("get", "/metrics", {}, 200),
        ("get", "/metrics", no_key, 401),
        ("post", "/embed", {"json": {"inputs": TEXTS}}, 200),
        ("post", "/embed", {"content": b"nope"}, 400),
        ("post", "/embed", {"json": {"inputs": []}}, 400),
        ("post", "/embed", {"json": {"inputs": "x"}, **no_key}, 401),
        ("post", "/embed", {"json": {"inputs": [LONG]}}, 413),
        ("post", "/embed", {"json": {"inputs": "x", "normalize": 1}}, 422),
        ("post", "/", {"json": {"inputs": "a single text"}}, 200),
        ("post", "/", {"json": {"inputs": ["x"] * (MAX_TEXTS + 1)}}, 413),
        ("post", "/", {"content": b"{}}"}, 400),
        ("post", "/", {"json": {"inputs": "x"}, **no_key}, 401),
        ("post", "/", {"json": {"inputs": 5}}, 422),
        ("post", "/rerank", {"json": {"query": "wing", "texts": TEXTS, "return_text": True}}, 200),
        ("post", "/rerank", {"json": {"query": "wing", "texts": []}}, 400),
        ("post", "/rerank", {"json": {"query": "wing", "texts": ["x"]}, **no_key}, 401),
        ("post", "/rerank", {"json": {"query": "wing", "texts": [LONG]}}, 413),
        ("post", "/rerank", {"json": {"query": "wing", "texts": ["x"], "raw_scores": 1}}, 422),
        ("get", "/info", {}, 200),
        ("get", "/info", no_key, 401),
        *(
            call
            for base in ("/models/{model}", "/models/{model}/embed")
            for call in (
                ("post", base, {"json": {"inputs": TEXTS}}, 200),
                ("post", base, {"content": b"nope"}, 400),
                ("post", base, {"json": {"inputs": "x"}, **no_key}, 401),
                ("post", base, {"json": {"inputs": [LONG]}}, 413),
                ("post", base, {"json": {"inputs": "x", "normalize": 1}}, 422),
            )
        ),
        ("get", "/models/{model}/info", {}, 200),
        ("get", "/models/{model}/info", no_key, 401),
        ("get", "/openapi.json", {}, 200),
        ("get", "/openapi.json", no_key, 401),
        ("get", "/", {}, 200),
        ("get", "/docs", {}, 200),
    ]


@pytest.fixture(scope="module")
def document(server: Server) -> dict:
    return httpx.get(f"{server.url}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()


def test_the_description_is_valid_openapi_31(document: dict):
    validate = pytest.importorskip("openapi_spec_validator").validate
    validate(document)  # raises on an invalid document
    assert document["openapi"] == "3.1.0"
    schema = document["components"]["schemas"]
    assert schema["EmbeddingsRequest"]["properties"]["input"]["oneOf"][1]["maxItems"] == MAX_TEXTS


def test_every_documented_answer_of_every_route_fits_the_description(client, document: dict, tiny_bert):
    seen = set()
    for method, path, arguments, status in live_calls():
        actual = path.replace("{model}", tiny_bert.name)  # /models/{model}/...: the served model
        response = client.request(method.upper(), actual, **arguments)
        assert response.status_code == status, (method, actual, response.text[:300])
        check_against(document, method, path, response)
        seen.add((method, path, str(status)))
    for method, path, response in loading_and_indexless_answers():
        check_against(document, method, path, response)
        seen.add((method, path, str(response.status_code)))
    documented = {
        (method, path, status)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status in operation["responses"]
    }
    # not provoked here: a client that leaves (499), TEI's full queue (429) and a model this
    # one-model server does not serve (404: test_serve_models; one model served answers to any name)
    rare = {("post", "/v1/embeddings", "499"), ("post", "/embed", "429"), ("post", "/", "429")}
    rare |= {("post", "/models/{model}", "429"), ("post", "/models/{model}/embed", "429")}
    rare |= {(m, p, "404") for m, p in (("post", "/models/{model}"), ("post", "/models/{model}/embed"))}
    rare.add(("get", "/models/{model}/info", "404"))
    rare.add(("post", "/v1/embeddings", "404"))
    assert documented - rare == seen


def loading_and_indexless_answers() -> list[tuple[str, str, httpx.Response]]:
    """503 from every route while a model loads, then 404 from /search with no index and 424 from
    /rerank with no cross-encoder (in-process)."""
    from starlette.testclient import TestClient
    from test_serve_app import FakeEncoder

    from embedkit.serve.app import create_app
    from embedkit.serve.engine import Engine
    from embedkit.serve.served_model import ServedModel
    from embedkit.serve.settings import ServeConfig

    gate = threading.Event()

    def load(config):
        assert gate.wait(10)
        return ServedModel(FakeEncoder())

    original = ServedModel.load
    ServedModel.load = staticmethod(load)
    answers = []
    try:
        with TestClient(create_app(Engine(ServeConfig(max_wait_ms=0)))) as app:
            for method, path, body in [
                ("post", "/v1/embeddings", {"input": "x"}),
                ("post", "/search", {"query": "x"}),
                ("get", "/v1/models", None),
                ("get", "/health", None),
                ("post", "/embed", {"inputs": "x"}),
                ("post", "/", {"inputs": "x"}),
                ("get", "/info", None),
                ("post", "/rerank", {"query": "x", "texts": ["y"]}),
                ("post", "/models/{model}/embed", {"inputs": "x"}),
                ("post", "/models/{model}", {"inputs": "x"}),
                ("get", "/models/{model}/info", None),
            ]:
                response = app.request(method.upper(), path.replace("{model}", "any"), json=body)
                assert response.status_code == 503, (path, response.text)
                answers.append((method, path, response))
            gate.set()
            for _ in range(200):
                if app.get("/health").status_code == 200:
                    break
                threading.Event().wait(0.02)
            answers.append(("post", "/search", app.post("/search", json={"query": "x"})))
            assert answers[-1][2].status_code == 404
            answers.append(("post", "/rerank", app.post("/rerank", json={"query": "x", "texts": ["y"]})))
            assert answers[-1][2].status_code == 424  # no cross-encoder: TEI's answer on an embedder
    finally:
        ServedModel.load = original
    return answers


@pytest.mark.parametrize(
    "body",
    [
        {"query": "x"},
        {"queries": ["a", "b"], "k": 5, "mode": "lexical"},
        {"query": "x", "queries": ["y"]},
        {},
        {"query": ["x"]},
        {"query": "x", "k": 0},
        {"query": "x", "k": 1001},
        {"query": "x", "k": True},
        {"query": "x", "k": 2.5},
        {"query": "x", "mode": "fuzzy"},
        {"query": "  "},
        {"queries": []},
        {"queries": ["ok", " "]},
        {"queries": [1, 2]},
    ],
)
def test_search_checks_agree_with_the_description(client, document: dict, body: dict):
    """The hand-written /search checks and the described request body take the same bodies."""
    validator = validator_for(document, {"$ref": "#/components/schemas/SearchRequest"})
    response = client.post("/search", json=body)
    assert validator.is_valid(body) == (response.status_code == 200), response.text


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x"},
        {"input": ["a", "b"], "model": "m", "encoding_format": "base64"},
        {"input": []},
        {"input": ""},
        {"input": [[1, 2]]},
        {"model": "m"},
        {"input": "x", "encoding_format": "int8"},
        {"input": "x", "model": 3},
    ],
)
def test_embeddings_checks_agree_with_the_description(client, document: dict, body: dict):
    validator = validator_for(document, {"$ref": "#/components/schemas/EmbeddingsRequest"})
    response = client.post("/v1/embeddings", json=body)
    assert validator.is_valid(body) == (response.status_code == 200), response.text
