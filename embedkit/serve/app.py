"""The HTTP API (Starlette, an ASGI app for uvicorn) over an `Engine`.

Routes: `POST /v1/embeddings` (the OpenAI embeddings API: an `openai` client with
`base_url=".../v1"` works unchanged), `POST /search`, `GET /v1/models`, `GET /health` (never needs
the key) and `GET /metrics` (Prometheus text). Every error is a JSON body in OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`: 400 for a body that is not a JSON object, 422
for a field of the wrong type or value (an empty input list or string included), 401 for a
missing or wrong key, 404 for an unknown route or /search without an index, 413 for a body or
a list over the limits, 503 while the model loads or when the queue is full. An unexpected
failure is a 500 with a one-line message; the traceback goes to the server's log only.

Bodies are parsed with orjson and checked by hand, not by a schema library: the messages then
say exactly what is wrong, and a request costs less of the CPU the model needs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
import time
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embedkit.errors import InputError
from embedkit.serve.batching import BatcherClosed, QueueFull
from embedkit.serve.engine import SEARCH_MODES, Embedded, Engine, ServedModel, hit_record
from embedkit.serve.metrics import CONTENT_TYPE
from embedkit.serve.page import PATHS, ApiHelpers, extra_routes

log = logging.getLogger("embedkit.serve")
ROUTES = tuple(dict.fromkeys(("/v1/embeddings", "/search", "/v1/models", "/health", "/metrics", *PATHS)))
TRUNCATED_HEADER = "X-Embedkit-Truncated"


class ApiError(Exception):
    """An error answered as JSON with `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.headers = status, message, kind, param, headers


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(error: ApiError) -> Response:
    payload = {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": None}}
    return json_response(payload, error.status, error.headers)


def create_app(engine: Engine) -> ASGIApp:
    """The ASGI app; its lifespan loads the model in the background and closes it on shutdown."""
    config = engine.config
    key = config.api_key.encode() if config.api_key else None
    started = int(time.time())

    def authorize(request: Request) -> None:
        if key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key):
            raise ApiError(
                401,
                "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                "authentication_error",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def require_ready() -> ServedModel:
        if not engine.ready or engine.model is None:
            message = "the model failed to load" if engine.error else "the model is loading; retry shortly"
            raise ApiError(503, message, "service_unavailable", headers={"Retry-After": "1"})
        return engine.model

    async def read_object(request: Request) -> dict[str, Any]:
        limit = config.max_body_bytes
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise ApiError(413, f"the body has {int(length):,} bytes; this server takes at most {limit:,}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is over this server's limit of {limit:,} bytes")
            chunks.append(chunk)
        try:
            body = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"the body must be a JSON object, not {_json_type(body)}")
        return body

    def texts_of(value: Any, param: str) -> list[str]:
        if isinstance(value, str):
            value = [value]
            single = True
        elif isinstance(value, list):
            single = False
        else:
            kind = _json_type(value)
            raise ApiError(422, f"'{param}' must be a string or a list of strings, not {kind}", param=param)
        if not value:
            raise ApiError(422, f"'{param}' is an empty list", param=param)
        if len(value) > config.max_texts:
            limit = config.max_texts
            raise ApiError(413, f"'{param}' has {len(value):,} texts; this server takes at most {limit:,}")
        for i, text in enumerate(value):
            where = f"'{param}'" if single else f"{param}[{i}]"
            if not isinstance(text, str):
                if isinstance(text, (int, list)) and not isinstance(text, bool):
                    raise ApiError(422, f"{where}: token ids are not accepted; send text", param=param)
                raise ApiError(422, f"{where} must be a string, not {_json_type(text)}", param=param)
            if not text.strip():
                raise ApiError(422, f"{where} is an empty string", param=param)
        return value

    async def embeddings(request: Request) -> Response:
        authorize(request)
        model = require_ready()
        body = await read_object(request)
        texts = texts_of(body.get("input"), "input")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            message = f"'encoding_format' must be float or base64, not {encoding!r}"
            raise ApiError(422, message, param="encoding_format")
        if not isinstance(body.get("model", ""), str):
            raise ApiError(422, "'model' must be a string", param="model")
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != model.dim:
            message = f"this model gives {model.dim}-d vectors; 'dimensions' cannot change that"
            raise ApiError(422, message, param="dimensions")
        result = await embed(request, texts)
        vectors = result.vectors
        if encoding == "base64":
            # OpenAI's encoding: the little-endian float32 bytes of each vector, base64.
            little = vectors.astype("<f4", copy=False)
            data = [
                {"object": "embedding", "index": i, "embedding": base64.b64encode(row.tobytes()).decode()}
                for i, row in enumerate(little)
            ]
        else:
            data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(vectors)]
        usage = {
            "prompt_tokens": result.tokens,
            "total_tokens": result.tokens,
            "truncated_texts": result.truncated,  # also in the X-Embedkit-Truncated header
        }
        payload = {"object": "list", "data": data, "model": model.name, "usage": usage}
        return json_response(payload, headers={TRUNCATED_HEADER: str(result.truncated)})

    def busy(exc: Exception) -> ApiError:
        return ApiError(
            503, f"the server is busy: {exc}", "service_unavailable", headers={"Retry-After": "1"}
        )

    async def embed(request: Request, texts: list[str]) -> Embedded:
        """`engine.embed`, abandoned when the client disconnects: its texts still queued are then
        dropped rather than computed for nobody (clients that time out and retry would otherwise
        pile work up behind themselves)."""
        work = asyncio.ensure_future(engine.embed(texts))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not work.done():
            work.cancel()
            raise ApiError(499, "the client closed the connection", "client_closed_request")
        try:
            return work.result()
        except QueueFull as exc:
            raise busy(exc) from None
        except BatcherClosed:
            raise ApiError(503, "the server is shutting down", "service_unavailable") from None

    async def search(request: Request) -> Response:
        authorize(request)
        model = require_ready()
        if model.index is None:
            message = "this server has no index: start it with `embedkit serve --index INDEX_DIR`"
            raise ApiError(404, message, "not_found")
        body = await read_object(request)
        if ("query" in body) == ("queries" in body):
            raise ApiError(422, "give one of 'query' (a string) or 'queries' (a list of strings)")
        param = "query" if "query" in body else "queries"
        if param == "query" and not isinstance(body["query"], str):
            raise ApiError(422, f"'query' must be a string, not {_json_type(body['query'])}", param="query")
        queries = texts_of(body[param], param)
        k = body.get("k", 10)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= config.max_k:
            raise ApiError(422, f"'k' must be an integer from 1 to {config.max_k}, not {k!r}", param="k")
        mode = body.get("mode")
        if mode is not None and mode not in SEARCH_MODES:
            message = f"'mode' must be one of {', '.join(SEARCH_MODES)}, not {mode!r}"
            raise ApiError(422, message, param="mode")
        try:
            results, truncated = await engine.search(queries, k, mode)
        except InputError as exc:
            raise ApiError(400, str(exc).splitlines()[0], param="mode" if mode else None) from None
        except QueueFull as exc:
            raise busy(exc) from None
        payload = {
            "object": "list",
            "model": model.name,
            "mode": mode or "dense",
            "results": [
                {"query": query, "hits": [hit_record(rank, hit) for rank, hit in enumerate(hits, 1)]}
                for query, hits in zip(queries, results, strict=True)
            ],
        }
        return json_response(payload, headers={TRUNCATED_HEADER: str(truncated)})

    async def models(request: Request) -> Response:
        authorize(request)
        model = require_ready()
        card = {"id": model.name, "object": "model", "created": started, "owned_by": "embedkit"}
        card.update(
            backend=model.backend,
            device=model.device,
            precision=model.precision,
            dim=model.dim,
            max_seq_length=model.max_seq_length,
            index=model.index is not None,
        )
        return json_response({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        if engine.ready and engine.model is not None:
            return json_response({"status": "ok", "model": engine.model.name})
        if engine.error is not None:
            return json_response({"status": "error", "message": str(engine.error).splitlines()[0]}, 503)
        return json_response({"status": "loading"}, 503, {"Retry-After": "1"})

    async def metrics(request: Request) -> Response:
        authorize(request)
        return Response(engine.metrics.render(), media_type=CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        loading = asyncio.create_task(engine.start())
        yield
        if not loading.done():
            loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loading
        await engine.close()

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return error_response(ApiError(exc.status_code, str(exc.detail), kind, headers=exc.headers))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
        message = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return error_response(ApiError(500, message.rstrip(": "), "server_error"))

    app = Starlette(
        routes=[
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/search", search, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            # the search page, /docs, /openapi.json and TEI's routes (embedkit.serve.page)
            *extra_routes(engine, ApiHelpers(authorize, require_ready, read_object, embed, ApiError)),
        ],
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    return MetricsMiddleware(app, engine)


class MetricsMiddleware:
    """Counts every request by route and status, and times it (pure ASGI: no per-request task)."""

    def __init__(self, app: Starlette, engine: Engine) -> None:
        self.app = app
        self.metrics = engine.metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.observe_request(route, status, time.perf_counter() - start)


async def _disconnected(request: Request) -> None:
    """Return when the client has gone (the body is read by then: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
