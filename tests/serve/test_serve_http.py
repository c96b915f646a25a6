"""`embedkit serve` as a real process on a free port, spoken to over HTTP (one server for the module)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
parser = pytest.importorskip("prometheus_client.parser")

from serve_helpers import Server, serving  # noqa: E402

KEY = "test-key-123"
MAX_TEXTS = 100
MAX_BODY_BYTES = 64 * 1024
TEXTS = [
    "the wing flow is high",
    "a man is playing guitar on the beach",
    "shock wave and boundary layer at mach number five, with heat transfer",
    "one",
]


@pytest.fixture(scope="module")
def server(tiny_onnx: Path, tiny_index: Path):
    args = [str(tiny_onnx), "--index", str(tiny_index), "--api-key", KEY, "--max-texts", str(MAX_TEXTS)]
    args += ["--max-body-mb", str(MAX_BODY_BYTES / 2**20), "--max-wait-ms", "2"]
    with serving(args) as process:
        yield process


@pytest.fixture(scope="module")
def encoder(tiny_onnx: Path):
    from embedkit import load_encoder

    return load_encoder(tiny_onnx, device="cpu")


@pytest.fixture
def client(server: Server):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
        yield c


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def token_counts(model_dir: Path, texts: list[str]) -> list[int]:
    """Tokens per text, truncated at 64, counted with transformers' tokenizer (not the server's)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return [len(ids) for ids in tokenizer(texts, truncation=True, max_length=64)["input_ids"]]


def metric_values(client) -> dict[tuple[str, tuple], float]:
    text = client.get("/metrics").text
    families = parser.text_string_to_metric_families(text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_health_and_models(server: Server, client, tiny_bert: Path):
    # an export is named after the torch folder it came from (it has no card of its own)
    health = httpx.get(f"{server.url}/health").json()
    assert health == {"status": "ok", "model": tiny_bert.name, "index_version": "v-000001"}
    (card,) = client.get("/v1/models").json()["data"]
    assert (card["id"], card["object"], card["dim"], card["max_seq_length"]) == (
        tiny_bert.name,
        "model",
        32,
        64,
    )
    assert "ready:" in "".join(server.stdout) and "(onnx, cpu, fp32, 32-d)" in "".join(server.stdout)


@pytest.mark.parametrize("encoding_format", [None, "float", "base64"])
def test_openai_client_gets_the_encoders_vectors(
    server: Server, encoder, tiny_onnx: Path, tiny_bert: Path, encoding_format
):
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    options = {} if encoding_format is None else {"encoding_format": encoding_format}
    response = api.embeddings.create(input=TEXTS, model="anything", **options)
    if encoding_format == "base64":  # the client hands base64 strings back undecoded when asked for them
        got = np.stack(
            [np.frombuffer(__import__("base64").b64decode(d.embedding), "<f4") for d in response.data]
        )
    else:
        got = np.array([d.embedding for d in response.data])
    assert [d.index for d in response.data] == list(range(len(TEXTS)))
    assert cosines(got, encoder.encode(TEXTS)).min() >= 0.99999
    assert response.model == tiny_bert.name  # the export is named after its source
    assert response.usage.prompt_tokens == response.usage.total_tokens == sum(token_counts(tiny_onnx, TEXTS))

    one = api.embeddings.create(input="the cat eats food", model="anything")
    assert len(one.data) == 1
    assert cosines(np.array([one.data[0].embedding]), encoder.encode(["the cat eats food"]))[0] >= 0.99999


def test_64_concurrent_requests_get_their_own_vectors_in_order(server: Server, encoder):
    words = ["wing", "flow", "air", "pressure", "shock", "wave", "heat", "drag", "lift", "cat", "dog"]
    requests = [
        [
            f"{words[i % len(words)]} {i} " + " ".join(words[(i + j) % len(words)] for j in range(i % 7 + t))
            for t in range(i % 3 + 1)
        ]
        for i in range(64)
    ]
    assert len({t for r in requests for t in r}) == sum(map(len, requests))  # every text distinct

    async def main():
        limits = httpx.Limits(max_connections=64)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=limits, timeout=60) as c:
            return await asyncio.gather(
                *(c.post("/v1/embeddings", json={"input": texts}) for texts in requests)
            )

    responses = asyncio.run(main())
    every = [t for r in requests for t in r]
    reference = dict(zip(every, encoder.encode(every), strict=True))
    for texts, response in zip(requests, responses, strict=True):
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert [d["index"] for d in data] == list(range(len(texts)))
        got = np.array([d["embedding"] for d in data])
        assert cosines(got, np.stack([reference[t] for t in texts])).min() >= 0.99999


def test_search_returns_the_hits_of_embedkit_search(client, tiny_index: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    queries = ["the cat eats food", "shock wave", "air flow over a wing at high speed"]
    (tmp_path / "queries.txt").write_text("\n".join(queries) + "\n")
    cli = CliRunner().invoke(
        app,
        [
            "search",
            str(tiny_index),
            "--queries",
            str(tmp_path / "queries.txt"),
            "-k",
            "4",
            "--json",
            "--include",
            "title,text,metadata",
            "--device",
            "cpu",
        ],
    )
    assert cli.exit_code == 0, cli.output
    expected = [json.loads(line) for line in cli.stdout.splitlines()]

    asked = {"queries": queries, "k": 4, "include": ["title", "text", "metadata"]}
    response = client.post("/search", json=asked)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["query"] for r in results] == queries
    for got, want in zip(results, expected, strict=True):
        assert [h["id"] for h in got["hits"]] == [h["id"] for h in want["hits"]]
        assert [h["score"] for h in got["hits"]] == pytest.approx(
            [h["score"] for h in want["hits"]], abs=2e-6
        )
        for hit, reference in zip(got["hits"], want["hits"], strict=True):
            assert (hit["rank"], hit["title"], hit["text"]) == (
                reference["rank"],
                reference["title"],
                reference["text"],
            )
            assert hit["metadata"] == reference.get("metadata", {})

    single = client.post("/search", json={"query": queries[0], "k": 4, "mode": "dense"}).json()["results"]
    assert [h["id"] for h in single[0]["hits"]] == [h["id"] for h in expected[0]["hits"]]


def test_search_modes_other_than_dense(client, tiny_index: Path):
    response = client.post("/search", json={"query": "the cat eats food", "mode": "hybrid"})
    assert response.status_code == 200, response.text
    assert response.json()["mode"] == "hybrid"
    bogus = client.post("/search", json={"query": "the cat eats food", "mode": "fuzzy"})
    assert bogus.status_code == 422 and "mode" in bogus.json()["error"]["message"]


def test_api_key_is_required_except_for_health(server: Server):
    body = {"input": "a text"}
    assert httpx.post(f"{server.url}/v1/embeddings", json=body).status_code == 401
    wrong = httpx.post(f"{server.url}/v1/embeddings", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "API key" in wrong.json()["error"]["message"]
    assert (
        httpx.post(f"{server.url}/v1/embeddings", json=body, headers={"Authorization": KEY}).status_code
        == 401
    )
    for path in ("/v1/models", "/metrics"):
        assert httpx.get(f"{server.url}{path}").status_code == 401
    assert httpx.post(f"{server.url}/search", json={"query": "x"}).status_code == 401
    assert httpx.get(f"{server.url}/health").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0).embeddings.create(
            input="x", model="m"
        )


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/v1/embeddings", b"{", 400, "not valid JSON"),
        ("/v1/embeddings", b"", 400, "not valid JSON"),
        ("/v1/embeddings", b"[1, 2]", 400, "JSON object"),
        ("/v1/embeddings", b"{}", 422, "'input'"),
        ("/v1/embeddings", b'{"input": 5}', 422, "string or a list"),
        ("/v1/embeddings", b'{"input": []}', 422, "empty list"),
        ("/v1/embeddings", b'{"input": ""}', 422, "empty string"),
        ("/v1/embeddings", b'{"input": ["ok", "  "]}', 422, "input[1] is an empty string"),
        ("/v1/embeddings", b'{"input": ["ok", null]}', 422, "input[1] must be a string"),
        ("/v1/embeddings", b'{"input": [[1, 2]]}', 422, "token ids"),
        (
            "/v1/embeddings",
            b'{"input": [["a", "b"]]}',
            422,
            "input[0] is a list: 'input' must be a string or a list",
        ),
        ("/v1/embeddings", b'{"input": "x", "encoding_format": "hex"}', 422, "encoding_format"),
        ("/v1/embeddings", b'{"input": "x", "model": 3}', 422, "'model'"),
        ("/v1/embeddings", b'{"input": "x", "dimensions": 64}', 422, "32-d"),
        ("/search", b'{"query": 3}', 422, "'query' must be a string"),
        ("/search", b'{"queries": []}', 422, "empty list"),
        ("/search", b'{"query": "x", "queries": ["y"]}', 422, "one of"),
        ("/search", b'{"query": "x", "k": 0}', 422, "'k'"),
        ("/search", b'{"query": "x", "k": "3"}', 422, "'k'"),
        ("/search", b'{"query": "x", "k": true}', 422, "'k'"),
        ("/search", b'{"query": "x", "fusion": "sum"}', 422, "'fusion' must be one of prf"),
        ("/search", b'{"query": "x", "alpha": -1}', 422, "'alpha'"),
        ("/search", b'{"query": "x", "mode": "fuzzy"}', 422, "'mode' must be one of dense, lexical, hybrid"),
    ],
)
def test_malformed_bodies_get_json_errors(client, path: str, body: bytes, status: int, says: str):
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"


def test_unknown_routes_and_methods_get_json_errors(client):
    assert client.get("/nowhere").json()["error"]["type"] == "not_found"
    response = client.get("/v1/embeddings")
    assert response.status_code == 405 and "message" in response.json()["error"]


def test_limits_give_413(client):
    too_many = client.post("/v1/embeddings", json={"input": ["a text"] * (MAX_TEXTS + 1)})
    assert too_many.status_code == 413 and f"{MAX_TEXTS}" in too_many.json()["error"]["message"]
    too_big = client.post("/v1/embeddings", json={"input": "wing " * (MAX_BODY_BYTES // 5)})
    assert too_big.status_code == 413 and "bytes" in too_big.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"input": "'
        for _ in range(MAX_BODY_BYTES // 1000 + 1):
            yield b"w" * 1000
        yield b'"}'

    streamed = client.post("/v1/embeddings", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert client.post("/search", json={"queries": ["q"] * (MAX_TEXTS + 1)}).status_code == 413


def test_long_texts_are_truncated_and_the_response_says_so(client, encoder, tiny_onnx: Path):
    texts = ["the wing flow is high " * 40, "short text"]
    response = client.post("/v1/embeddings", json={"input": texts})
    assert response.status_code == 200, response.text
    assert response.headers["X-Embedkit-Truncated"] == "1"
    body = response.json()
    assert body["usage"]["truncated_texts"] == 1
    assert (
        body["usage"]["prompt_tokens"]
        == sum(token_counts(tiny_onnx, texts))
        == 64 + token_counts(tiny_onnx, texts)[1]
    )
    got = np.array([d["embedding"] for d in body["data"]])
    assert cosines(got, encoder.encode(texts)).min() >= 0.99999


def test_metrics_counters_move(client):
    before = metric_values(client)
    for _ in range(3):
        assert client.post("/v1/embeddings", json={"input": ["metric one", "metric two"]}).status_code == 200
    assert client.post("/v1/embeddings", json={"input": []}).status_code == 422
    after = metric_values(client)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    route = "/v1/embeddings"
    assert delta("embedkit_requests_total", route=route, status="200") == 3
    assert delta("embedkit_requests_total", route=route, status="422") == 1
    assert delta("embedkit_request_duration_seconds_count", route=route) == 4
    assert delta("embedkit_texts_embedded_total") == 6
    assert delta("embedkit_prompt_tokens_total") > 0
    assert 1 <= delta("embedkit_batch_size_count") <= 3
    assert delta("embedkit_batch_size_sum") == 6
    assert after[("embedkit_queue_depth", ())] == 0
    assert after[("embedkit_ready", ())] == 1


def test_search_where_filters_every_mode_and_refuses_bad_filters(client):
    # the corpus's metadata: w1 has year 1960, h1 has lab "b"; no other document has either field
    for mode in ("dense", "lexical", "hybrid"):
        where = "year = 1960 or lab = 'b'"
        body = {"query": "wing flow and heat transfer", "k": 8, "mode": mode, "where": where}
        response = client.post("/search", json=body)
        assert response.status_code == 200, response.text
        found = {h["id"] for h in response.json()["results"][0]["hits"]}
        assert found <= {"w1", "h1"} and (mode == "lexical" or found == {"w1", "h1"})
    for where, says in [
        ("year >", "position 7"),
        ("colour = 'red'", "unknown metadata field 'colour'"),
        ("year = 'old'", "holds numbers, not a string"),
    ]:
        response = client.post("/search", json={"query": "wing", "where": where})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert says in error["message"] and error["param"] == "where"
    assert client.post("/search", json={"query": "wing", "where": 3}).status_code == 422
