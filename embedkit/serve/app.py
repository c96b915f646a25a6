"""The HTTP API (Starlette, an ASGI app for uvicorn) over an `Engine`.

Routes: `POST /v1/embeddings` (the OpenAI embeddings API: an `openai` client with
`base_url=".../v1"` works unchanged), `POST /search`, `GET /v1/models`, `GET /health` (never needs
the key) and `GET /metrics` (Prometheus text), plus the page, `/docs`, `/openapi.json` and TEI's
routes (`embedkit.serve.page`). Every error is a JSON body in OpenAI's shape,
`{"error": {"message", "type", "param", "code"}}`: 400 for a body that is not a JSON object, 422
for a field of the wrong type or value (an empty input list or string included), 401 for a
missing or wrong key, 404 for an unknown route or /search without an index, 413 for a body, a
list or a request's tokens over the limits, 503 with `Retry-After` while the model loads or when
the queue (texts or tokens) is full. A client that leaves before its answer is counted as 499 and
logged in one line, not as a server error. An unexpected failure is a 500 with a one-line
message; the traceback goes to the server's log only. A request that is not HTTP at all gets the
same JSON 400 (`server.json_error_protocol`), and a request cancelled before its answer (a forced
exit after a second signal) a JSON 503, not uvicorn's plain-text 500.

Bodies are parsed with orjson and checked against the definitions of `embedkit.serve.schemas`,
the same ones `/openapi.json` publishes. The handlers are module-level functions over the app's
`Server` (`request.app.state.server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embedkit.encode.dimensions import truncate_vectors
from embedkit.errors import InputError
from embedkit.search.hits import DEFAULT_FIELDS, checked_fields, hit_record
from embedkit.serve.dimensions import base64_rows, cut, dimensions_problem
from embedkit.serve.dynamic_batcher import BatcherClosed, QueueFull, TooLarge
from embedkit.serve.engine import Embedded, Engine
from embedkit.serve.metrics import CONTENT_TYPE
from embedkit.serve.page import PATHS, extra_routes
from embedkit.serve.route_helpers import ApiError, ApiHelpers
from embedkit.serve.schemas import OPENAI_EMBEDDINGS, SEARCH, BodyError, json_type
from embedkit.serve.served_model import ServedModel

log = logging.getLogger("embedkit.serve")
ROUTES = tuple(dict.fromkeys(("/v1/embeddings", "/search", "/v1/models", "/health", "/metrics", *PATHS)))
TRUNCATED_HEADER = "X-Embedkit-Truncated"


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def error_response(error: ApiError) -> Response:
    payload = {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": None}}
    return json_response(payload, error.status, error.headers)


class Server:
    """The app's state: the engine, the key, and the checks every route shares."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.config = engine.config
        self.key = engine.config.api_key.encode() if engine.config.api_key else None
        self.started = int(time.time())

    def authorize(self, request: Request) -> None:
        if self.key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.key):
            raise ApiError(
                401,
                "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                "authentication_error",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def require_ready(self) -> ServedModel:
        engine = self.engine
        if not engine.ready or engine.model is None:
            message = "the model failed to load" if engine.error else "the model is loading; retry shortly"
            raise ApiError(503, message, "service_unavailable", headers={"Retry-After": "1"})
        return engine.model

    async def read_object(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length", "")
        if length.isdigit() and (len(length) > 18 or int(length) > limit):  # no int() of 5,000 digits
            raise ApiError(413, f"the body has {length[:24]} bytes; this server takes at most {limit:,}")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"the body is over this server's limit of {limit:,} bytes")
                chunks.append(chunk)
        except ClientDisconnect:
            raise self.client_gone(request, f"after {size:,} bytes of its body") from None
        try:
            body = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"the body must be a JSON object, not {json_type(body)}")
        return body

    def client_gone(self, request: Request, when: str) -> ApiError:
        """The client closed the connection: its doing, so counted apart from server errors."""
        self.engine.metrics.count_disconnect()
        client = request.client.host if request.client else "a client"
        log.info("%s %s: %s closed the connection %s", request.method, request.url.path, client, when)
        return ApiError(499, "the client closed the connection", "client_closed_request")

    def engine_for(self, name: str | None) -> Engine:
        """The engine of the served model `name` (the OpenAI `model` field); 404 for another."""
        try:
            return self.engine.engine_for(name)
        except InputError as exc:
            raise ApiError(404, str(exc), param="model") from None

    async def embed(self, request: Request, texts: list[str], engine: Engine | None = None) -> Embedded:
        """`engine.embed` (the first model's by default), abandoned when the client disconnects:
        its texts still queued are then dropped rather than computed for nobody (clients that
        time out and retry would otherwise pile work up behind themselves)."""
        work = asyncio.ensure_future((engine or self.engine).embed(texts))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not work.done():
            work.cancel()
            raise self.client_gone(request, "while its texts were queued")
        try:
            return work.result()
        except (QueueFull, TooLarge) as exc:
            raise queue_error(exc) from None
        except BatcherClosed:
            raise ApiError(503, "the server is shutting down", "service_unavailable") from None


def queue_error(exc: QueueFull | TooLarge) -> ApiError:
    """503 with the seconds the queued work needs for a full queue; 413 for a request that can
    never fit it."""
    if isinstance(exc, TooLarge):
        return ApiError(413, str(exc))
    headers = {"Retry-After": str(exc.retry_after)}
    return ApiError(503, f"the server is busy: {exc}", "service_unavailable", headers=headers)


def server_of(request: Request) -> Server:
    server: Server = request.app.state.server  # set by `create_app`; starlette's `State` holds Any
    return server


async def embeddings(request: Request) -> Response:
    server = server_of(request)
    server.authorize(request)
    server.require_ready()
    values = OPENAI_EMBEDDINGS.check(await server.read_object(request), server.config)
    engine = server.engine_for(values.get("model"))
    model = engine.model
    assert model is not None  # every engine is ready once the first one is
    texts, encoding = values["input"], values["encoding_format"]
    dimensions = values.get("dimensions")
    problem = dimensions_problem(model.dim, dimensions)
    if problem is not None:
        raise ApiError(422, problem, param="dimensions")
    result = await server.embed(request, texts, engine)
    size = cut(dimensions, model.dim)  # OpenAI's shortened vectors are unit length: renormalized
    vectors = result.vectors if size is None else truncate_vectors(result.vectors, size)
    if encoding == "base64":
        rows = base64_rows(vectors)
        data = [{"object": "embedding", "index": i, "embedding": text} for i, text in enumerate(rows)]
    else:
        data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(vectors)]
    usage = {
        "prompt_tokens": result.tokens,
        "total_tokens": result.tokens,
        "truncated_texts": result.truncated,  # also in the X-Embedkit-Truncated header
    }
    payload = {"object": "list", "data": data, "model": model.name, "usage": usage}
    return json_response(payload, headers={TRUNCATED_HEADER: str(result.truncated)})


async def search(request: Request) -> Response:
    """`embedkit search --json`'s records over HTTP: the mode used (the index's default when none is
    asked for), the fusion and weight of a hybrid search, and the index version answered from."""
    server = server_of(request)
    server.authorize(request)
    server.require_ready()
    values = SEARCH.check(await server.read_object(request), server.config)
    engine = server.engine_for(values.get("model"))
    model = engine.model
    assert model is not None  # every engine is ready once the first one is
    if model.index is None:
        what = "this server has" if engine is server.engine else f"the model {model.name!r} has"
        message = f"{what} no index: start the server with `embedkit serve --index INDEX_DIR`"
        raise ApiError(404, message, "not_found")
    queries = [values["query"]] if "query" in values else values["queries"]
    mode, where = values.get("mode"), values.get("where")
    try:
        fields = checked_fields(values.get("include", DEFAULT_FIELDS))
    except InputError as exc:
        raise ApiError(400, str(exc), param="include") from None
    try:
        answer = await engine.search(
            queries,
            values["k"],
            mode=mode,
            fusion=values.get("fusion"),  # absent: the index's calibrated choice
            alpha=values.get("alpha"),
            snippets=values["snippets"],
            passages=values["passages"],
            where=where,
            rerank_depth=values.get("rerank_depth"),
        )
    except InputError as exc:
        message = str(exc).splitlines()[0]
        param = "where" if where is not None and message.startswith("where") else "mode" if mode else None
        raise ApiError(400, message, param=param) from None
    except (QueueFull, TooLarge) as exc:
        raise queue_error(exc) from None
    how = answer.request.record()  # what the index that answered ran
    payload = {
        "object": "list",
        "model": model.name,
        **how,
        **({"rerank_depth": values["rerank_depth"]} if "rerank_depth" in values else {}),
        "index_version": answer.index_version,
        "results": [
            {"query": query, "hits": [hit_record(rank, hit, fields) for rank, hit in enumerate(hits, 1)]}
            for query, hits in zip(queries, answer.hits, strict=True)
        ],
    }
    return json_response(payload, headers={TRUNCATED_HEADER: str(answer.truncated)})


async def models(request: Request) -> Response:
    """Every served model, the first (the one with the index and TEI's routes) first."""
    server = server_of(request)
    server.authorize(request)
    server.require_ready()
    cards = []
    for name in server.engine.served_names():
        model = server.engine.engine_for(name).model
        assert model is not None
        card = {"id": model.name, "object": "model", "created": server.started, "owned_by": "embedkit"}
        card.update(
            backend=model.backend,
            device=model.device,
            precision=model.precision,
            dim=model.dim,
            max_seq_length=model.max_seq_length,
            index=model.index is not None,
        )
        cards.append(card)
    return json_response({"object": "list", "data": cards})


async def health(request: Request) -> Response:
    engine = server_of(request).engine
    if engine.ready and engine.model is not None:
        status: dict[str, Any] = {"status": "ok", "model": engine.model.name}
        if engine.model.index is not None:
            status["index_version"] = engine.model.index_version
        return json_response(status)
    if engine.error is not None:
        return json_response({"status": "error", "message": str(engine.error).splitlines()[0]}, 503)
    return json_response({"status": "loading"}, 503, {"Retry-After": "1"})


async def metrics(request: Request) -> Response:
    server = server_of(request)
    server.authorize(request)
    return Response(server.engine.metrics.render(), media_type=CONTENT_TYPE)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def body_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyError)
    return error_response(ApiError(exc.status, exc.message, param=exc.param))


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    headers = dict(exc.headers) if exc.headers else None
    return error_response(ApiError(exc.status_code, str(exc.detail), kind, headers=headers))


async def server_error(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
    message = f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return error_response(ApiError(500, message.rstrip(": "), "server_error"))


def create_app(engine: Engine) -> ASGIApp:
    """The ASGI app; its lifespan loads the model in the background and closes it on shutdown."""
    server = Server(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loading = asyncio.create_task(engine.start())
        yield
        if not loading.done():
            loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loading
        await engine.close()

    helpers = ApiHelpers(
        server.authorize, server.require_ready, server.read_object, server.embed, ApiError, server.engine_for
    )
    app = Starlette(
        routes=[
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/search", search, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            # the search page, /docs, /openapi.json and TEI's routes (embedkit.serve.page)
            *extra_routes(engine, helpers),
        ],
        exception_handlers={
            ApiError: api_error,
            BodyError: body_error,
            HTTPException: http_error,
            Exception: server_error,
        },
        lifespan=lifespan,
    )
    app.state.server = server
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
        status, answered = 500, False

        async def send_status(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except BaseException:
            # Cancelled before answering (a forced exit after a second signal): a JSON 503, not
            # uvicorn's plain-text 500 for an app that raised.
            if status == 500 and not answered:
                error = ApiError(503, "the server stopped before answering", "service_unavailable")
                with contextlib.suppress(Exception):
                    await error_response(error)(scope, receive, send)
                status = 503
            raise
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.observe_request(route, status, time.perf_counter() - start)


async def _disconnected(request: Request) -> None:
    """Return when the client has gone (the body is read by then: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
