"""`GET /openapi.json`: an OpenAPI 3.1 description of every route, built from `schemas`' bodies.

The request bodies are the `Body` definitions the routes check requests with (so the description
and the checks are one definition), with the server's own limits filled in; the response and error
bodies are the JSON Schemas below, which the tests validate live responses against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embedkit.search.fusion import FUSION_METHODS
from embedkit.search.request import SEARCH_MODES
from embedkit.serve.schemas import OPENAI_EMBEDDINGS, SEARCH, TEI_EMBED, TEI_RERANK, Body
from embedkit.serve.settings import ServeConfig

NUMBERS = {"type": "array", "items": {"type": "number"}}
NULLABLE_NUMBER = {"type": ["number", "null"]}

RESPONSES: dict[str, dict[str, Any]] = {
    "Error": {
        "description": "every error of the OpenAI-compatible and embedkit routes (OpenAI's shape)",
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": "null"},
                },
            }
        },
    },
    "TeiError": {
        "description": "every error of the text-embeddings-inference routes (TEI's shape)",
        "type": "object",
        "required": ["error", "error_type"],
        "properties": {
            "error": {"type": "string"},
            "error_type": {
                "enum": [
                    "Unhealthy",
                    "Backend",
                    "Overloaded",
                    "Validation",
                    "Tokenizer",
                    "Empty",
                    "Unauthorized",
                ]
            },
        },
    },
    "EmbeddingsResponse": {
        "type": "object",
        "required": ["object", "data", "model", "usage"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["object", "index", "embedding"],
                    "properties": {
                        "object": {"const": "embedding"},
                        "index": {"type": "integer", "minimum": 0},
                        "embedding": {"oneOf": [NUMBERS, {"type": "string"}]},  # float or base64
                    },
                },
            },
            "model": {"type": "string"},
            "usage": {
                "type": "object",
                "required": ["prompt_tokens", "total_tokens", "truncated_texts"],
                "properties": {
                    "prompt_tokens": {"type": "integer"},
                    "total_tokens": {"type": "integer"},
                    "truncated_texts": {"type": "integer"},
                },
            },
        },
    },
    "Hit": {
        "type": "object",
        "required": ["rank", "id", "score"],
        "properties": {
            "rank": {"type": "integer", "minimum": 1},
            "id": {"type": "string"},
            "score": {"type": "number"},
            "dense_score": NULLABLE_NUMBER,
            "lexical_score": NULLABLE_NUMBER,
            "snippet": {"type": ["string", "null"], "description": "HTML: the best window, terms in <b>"},
            "title": {"type": "string"},
            "text": {"type": "string"},
            "metadata": {"type": "object"},
        },
    },
    "SearchResponse": {
        "type": "object",
        "required": ["object", "model", "mode", "results"],
        "properties": {
            "object": {"const": "list"},
            "model": {"type": "string"},
            "mode": {
                "enum": list(SEARCH_MODES),
                "description": "the mode used: as asked, else the index's default",
            },
            "fusion": {
                "enum": list(FUSION_METHODS),
                "description": "hybrid only: how the rankings were fused",
            },
            "alpha": {"type": "number", "description": "hybrid only: the dense side's weight"},
            "index_version": {
                "type": ["string", "null"],
                "description": "the index version answered from (the server follows appends)",
            },
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["query", "hits"],
                    "properties": {
                        "query": {"type": "string"},
                        "hits": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
                    },
                },
            },
        },
    },
    "ModelsResponse": {
        "type": "object",
        "required": ["object", "data"],
        "properties": {
            "object": {"const": "list"},
            "data": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "object", "created", "owned_by", "dim", "max_seq_length", "index"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"const": "model"},
                        "created": {"type": "integer"},
                        "owned_by": {"type": "string"},
                        "backend": {"type": "string"},
                        "device": {"type": "string"},
                        "precision": {"type": "string"},
                        "dim": {"type": "integer"},
                        "max_seq_length": {"type": "integer"},
                        "index": {"type": "boolean", "description": "whether /search has an index"},
                    },
                },
            },
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"enum": ["ok", "loading", "error"]},
            "index_version": {"type": ["string", "null"], "description": "the index version served"},
            "model": {"type": "string"},
            "message": {"type": "string"},
        },
    },
    "TeiEmbedResponse": {"type": "array", "items": NUMBERS, "description": "one vector per input"},
    "TeiRerankResponse": {
        "type": "array",
        "description": "one rank per text, best first: its position in `texts`, its score, its text if asked",
        "items": {
            "type": "object",
            "required": ["index", "score"],
            "properties": {
                "index": {"type": "integer"},
                "score": {"type": "number"},
                "text": {"type": "string"},
            },
        },
    },
    "TeiInfo": {
        "type": "object",
        "required": [
            "model_id",
            "model_dtype",
            "model_type",
            "max_concurrent_requests",
            "max_input_length",
            "max_batch_tokens",
            "max_client_batch_size",
            "auto_truncate",
            "tokenization_workers",
            "version",
        ],
        "properties": {
            "model_id": {"type": "string"},
            "model_sha": {"type": ["string", "null"]},
            "model_dtype": {"type": "string"},
            "model_type": {
                "type": "object",
                "required": ["embedding"],
                "properties": {
                    "embedding": {"type": "object", "properties": {"pooling": {"type": "string"}}}
                },
            },
            "max_concurrent_requests": {"type": "integer"},
            "max_input_length": {"type": "integer"},
            "max_batch_tokens": {"type": "integer"},
            "max_batch_requests": {"type": ["integer", "null"]},
            "max_client_batch_size": {"type": "integer"},
            "auto_truncate": {"type": "boolean"},
            "tokenization_workers": {"type": "integer"},
            "version": {"type": "string"},
            "sha": {"type": ["string", "null"]},
            "docker_label": {"type": ["string", "null"]},
            "embedkit": {
                "type": "object",
                "description": "what this server runs with (embedkit.serve.sizing)",
                "required": ["device", "max_batch_tokens", "batches_in_flight", "shapes", "warmup"],
                "properties": {
                    "models": {
                        "type": "array",
                        "description": "every served model: runtime, weight files' bytes, resident memory "
                        "its loading took (memory_bytes, null where unreadable), batch times",
                        "items": {
                            "type": "object",
                            "required": ["name", "backend", "weights_bytes", "memory_bytes", "batches"],
                        },
                    },
                    "device": {"type": "string"},
                    "max_batch_tokens": {"type": "integer"},
                    "inference_workers": {"type": "integer"},
                    "batches_in_flight": {"type": "integer"},
                    "prepares_ahead": {"type": "boolean"},
                    "tokenization": {"type": "string"},
                    "max_queue_tokens": {"type": "integer"},
                    "shapes": {
                        "type": "object",
                        "required": ["fixed"],
                        "properties": {
                            "fixed": {"type": "boolean"},
                            "lengths": {"type": ["array", "null"], "items": {"type": "integer"}},
                            "rows": {"type": ["array", "null"], "items": {"type": "integer"}},
                        },
                    },
                    "warmup": {
                        "type": "object",
                        "required": ["enabled", "shapes", "seconds"],
                        "properties": {
                            "enabled": {"type": "boolean"},
                            "shapes": {"type": "integer"},
                            "seconds": {"type": "number"},
                        },
                    },
                },
            },
        },
    },
    "OpenApi": {"type": "object", "required": ["openapi", "info", "paths"]},
}

STATUS_TEXT = {
    200: "OK",
    400: "the body is not a JSON object",
    401: "missing or wrong API key (sent as 'Authorization: Bearer KEY')",
    404: "no index on this server (/search), or no served model of that name (/v1/embeddings, /models/NAME)",
    413: "the body, or a list in it, is over the server's limits (TEI: an input over max_input_length)",
    422: "a field of the wrong type or value",
    424: "the server has no re-ranker (start it with --rerank MODEL), or the model failed",
    429: "the queue is full; retry later",
    499: "the client closed the connection",
    503: "the model is loading or failed, or the queue is full",
}


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    response: str  # a RESPONSES name, or a media type (text/plain, text/html)
    request: Body | None = None
    errors: tuple[int, ...] = ()
    error: str = "Error"
    auth: bool = True


TEI_ERRORS = (400, 401, 413, 422, 429, 503)
MODEL_ERRORS = (*TEI_ERRORS, 404)  # /models/NAME/...: a name no served model has
OPERATIONS = (
    Operation(
        "post",
        "/v1/embeddings",
        "Embed texts (OpenAI's API)",
        "EmbeddingsResponse",
        OPENAI_EMBEDDINGS,
        (400, 401, 404, 413, 422, 499, 503),
    ),
    Operation(
        "post",
        "/search",
        "Search the index: dense, lexical or hybrid",
        "SearchResponse",
        SEARCH,
        (400, 401, 404, 413, 422, 503),
    ),
    Operation("get", "/v1/models", "The served models (OpenAI's API)", "ModelsResponse", errors=(401, 503)),
    Operation(
        "get",
        "/health",
        "Whether the model is ready; never needs the key",
        "Health",
        errors=(503,),
        auth=False,
    ),
    Operation("get", "/metrics", "Prometheus metrics", "text/plain", errors=(401,)),
    Operation(
        "post",
        "/embed",
        "Embed texts (text-embeddings-inference's API)",
        "TeiEmbedResponse",
        TEI_EMBED,
        TEI_ERRORS,
        "TeiError",
    ),
    Operation(
        "post",
        "/",
        "The same as /embed (TEI answers its model's task at /)",
        "TeiEmbedResponse",
        TEI_EMBED,
        TEI_ERRORS,
        "TeiError",
    ),
    Operation(
        "post",
        "/rerank",
        "Score texts against a query with the cross-encoder (text-embeddings-inference's API)",
        "TeiRerankResponse",
        TEI_RERANK,
        (400, 401, 413, 422, 424, 503),  # the cross-encoder has no queue to be full
        "TeiError",
    ),
    Operation(
        "get",
        "/info",
        "The model and limits (text-embeddings-inference's API)",
        "TeiInfo",
        errors=(401, 503),
        error="TeiError",
    ),
    *(
        Operation(method, path, f"{summary}: model NAME's TEI base URL", response, body, errors, "TeiError")
        for method, path, summary, response, body, errors in (
            ("post", "/models/{model}/embed", "Embed texts", "TeiEmbedResponse", TEI_EMBED, MODEL_ERRORS),
            ("post", "/models/{model}", "The same as /embed", "TeiEmbedResponse", TEI_EMBED, MODEL_ERRORS),
            ("get", "/models/{model}/info", "The model and limits", "TeiInfo", None, (401, 404, 503)),
        )
    ),
    Operation("get", "/openapi.json", "This description", "OpenApi", errors=(401,)),
    Operation("get", "/", "The search page (HTML; the data comes from the API)", "text/html", auth=False),
    Operation("get", "/docs", "This description as a page (HTML)", "text/html", auth=False),
)


def _content(name: str) -> dict[str, Any]:
    if "/" in name:
        return {name: {"schema": {"type": "string"}}}
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def openapi_document(config: ServeConfig, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of a server with `config`'s limits."""
    paths: dict[str, dict[str, Any]] = {}
    schemas = dict(RESPONSES)
    for op in OPERATIONS:
        operation: dict[str, Any] = {"summary": op.summary, "operationId": f"{op.method}{op.path}"}
        if "{model}" in op.path:  # a served model's name, as /v1/models lists it
            name = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
            operation["parameters"] = [name]
        if op.request is not None:
            schemas[op.request.name] = op.request.schema(config)
            operation["requestBody"] = {"required": True, "content": _content(op.request.name)}
        responses = {"200": {"description": "OK", "content": _content(op.response)}}
        for status in op.errors:
            error = "Health" if op.path == "/health" else op.error
            responses[str(status)] = {"description": STATUS_TEXT[status], "content": _content(error)}
        operation["responses"] = responses
        operation["security"] = [{"bearer": []}] if op.auth and config.api_key else []
        paths.setdefault(op.path, {})[op.method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "embedkit serve",
            "version": version,
            "description": "Embeddings (the OpenAI and text-embeddings-inference APIs) and search.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
