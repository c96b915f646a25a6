"""Every field of every request body, set to null and to each JSON type, against the description.

The cases are generated from `/openapi.json`: for each route with a request body and each of its
fields, a minimal valid body with that field replaced by `null`, a string, an integer, a number,
a boolean, a list and an object. jsonschema, reading the route's described body, is the reference:
a body it rejects must be a 4xx error in the route's own error shape, naming the field; no body,
valid or not, may be a 5xx.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")


from embedkit import __version__  # noqa: E402
from embedkit.serve.openapi import openapi_document  # noqa: E402
from embedkit.serve.settings import ServeConfig  # noqa: E402

CONFIG = ServeConfig(max_wait_ms=0)
DOCUMENT = openapi_document(CONFIG, __version__)
# One value of each JSON type (null first): what a client may send in place of any field.
VALUES: list[Any] = [None, "wing", 3, 2.5, True, ["wing"], {"text": "wing"}]


def _valid(schema: dict[str, Any]) -> Any:
    """A value the field's schema takes (its default, its first choice, else one of its type)."""
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    kinds = schema.get("type", "string")
    kind = kinds[0] if isinstance(kinds, list) else kinds
    return {"string": "wing", "integer": 1, "number": 0.5, "boolean": True}.get(kind, "wing")


def _cases() -> list[tuple[str, str, str, Any]]:
    """(path, body schema name, field, value) for every route with a request body."""
    cases = []
    for path, methods in DOCUMENT["paths"].items():
        operation = methods.get("post")
        if operation is None or "{model}" in path:  # /models/NAME/...: /embed's handler and body
            continue
        ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        name = ref.rsplit("/", 1)[1]
        for field in DOCUMENT["components"]["schemas"][name]["properties"]:
            cases += [(path, name, field, value) for value in VALUES]
    return cases


def _minimal(name: str) -> dict[str, Any]:
    """The smallest valid body: its required fields, and the first field of each one-of group."""
    schema = DOCUMENT["components"]["schemas"][name]
    wanted = list(schema.get("required", []))
    wanted += [alternative["required"][0] for alternative in schema.get("oneOf", [])[:1]]
    return {field: _valid(schema["properties"][field]) for field in wanted}


def _validator(name: str):
    root = {"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]}
    return jsonschema.Draft202012Validator(root)


@pytest.fixture(scope="module")
def client(app_client):
    return app_client


def test_the_cases_cover_every_body_route_and_field():
    routes = {(path, field) for path, _, field, _ in _cases()}
    assert {"/v1/embeddings", "/search", "/embed", "/", "/rerank"} == {path for path, _ in routes}
    assert {("/v1/embeddings", "input"), ("/search", "query"), ("/embed", "inputs")} <= routes


@pytest.mark.parametrize(("path", "name", "field", "value"), _cases())
def test_null_and_wrong_types_are_a_4xx_naming_the_field(client, path, name, field, value):
    body = {**_minimal(name), field: value}
    if name == "SearchRequest" and field == "queries":
        body.pop("query")  # one of the two
    response = client.post(path, json=body)
    assert response.status_code < 500, (body, response.text)  # never a server error
    valid = _validator(name).is_valid(body)
    if valid:
        # the schema-valid refusals: 'dimensions' must not exceed the model's own, 'where' must parse,
        # 'prompt_name' must name one of the model's prompts (the tiny model has none), 'include'
        # must name hit fields
        refusable = ("dimensions", "where", "prompt_name", "include")
        assert response.status_code == 200 or field in refusable, (body, response.text)
        return
    assert response.status_code in (400, 422), (body, response.text)
    answer = response.json()
    if name.startswith("Tei"):
        assert answer["error_type"] == "Validation" and field in answer["error"], answer
    else:
        error = answer["error"]
        assert error["type"] == "invalid_request_error" and field in error["message"], answer
