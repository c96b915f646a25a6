"""text-embeddings-inference's routes: `POST /embed` (and `POST /`), `POST /rerank` and `GET /info`.

A client written for TEI (huggingface_hub's `InferenceClient(base_url).feature_extraction`, which
posts to the base URL itself, LangChain's and LlamaIndex's TEI embeddings) works unchanged.
The shapes follow TEI's router: the request `{"inputs": str | [str], "normalize": true,
"truncate": false, "truncation_direction": "right", "prompt_name": null, "dimensions": null}`
(every field TEI defines; a value this server cannot honour is a 422, never ignored), the answer
a list of vectors, and every error `{"error", "error_type"}` with
TEI's statuses: an input over `max_input_length` tokens without `truncate` is a Validation
error (413, as TEI answers it), an empty list 400 (Empty), the model loading 503 (Unhealthy), the
queue full 429 (Overloaded), a failure inside the model 424 (Backend). A missing or wrong key is
401 with error_type Unauthorized (TEI answers a bare 401).

`POST /rerank` (`{"query", "texts", "raw_scores", "return_text", "truncate",
"truncation_direction"}`) scores each text against the query with the cross-encoder the server
was started with (`serve --rerank MODEL`; `embedkit.encode.cross_encoder`, the model that
`/search`'s `rerank_depth` and `embedkit search --rerank` use) and answers `[{"index", "score"}]`,
best first, as TEI does; without a cross-encoder it is TEI's answer to an embedding model, 424.

Two differences: the vectors are the model's own output, L2-normalized when `normalize` is true,
so a model that normalizes inside its graph refuses `normalize: false` (422); and an input over
`max_input_length` is counted by the server's tokenizer before the batcher counts it again (one
more tokenization, about 0.1 ms a sentence).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from embedkit.encode.batching import l2_normalize
from embedkit.serve.dimensions import cut, dimensions_problem
from embedkit.serve.engine import Engine
from embedkit.serve.schemas import TEI_EMBED, TEI_RERANK, Body, BodyError
from embedkit.serve.served_model import ServedModel

if TYPE_CHECKING:
    from embedkit.serve.route_helpers import ApiError, ApiHelpers

log = logging.getLogger("embedkit.serve")
DTYPES = {"fp32": "float32", "fp16": "float16"}  # TEI's names; others (int8) as embedkit names them


class TeiError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


def tei_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def from_api_error(exc: ApiError, engine: Engine) -> TeiError:
    """The app's `ApiError` (key, loading, body, busy) as TEI would have answered it."""
    if exc.status == 401:
        return TeiError(401, "Unauthorized", exc.message)
    if exc.status == 404:  # a model name no served model has (`/models/NAME/...`)
        return TeiError(404, "NotFound", exc.message)
    if exc.status == 503:
        # a ready model answers 503 only when the queue is full or the server is stopping
        return (
            TeiError(429, "Overloaded", exc.message)
            if engine.ready
            else TeiError(503, "Unhealthy", exc.message)
        )
    return TeiError(exc.status, "Validation", exc.message)


def over_long(model: ServedModel, texts: list[str]) -> int | None:
    """The position of the first text that the model's tokenizer truncates, or None."""
    truncated = np.flatnonzero(model.stages.tokenize(texts).truncated)
    return int(truncated[0]) if len(truncated) else None


def _check_direction(values: dict[str, Any]) -> None:
    if values["truncation_direction"].lower() == "left":
        message = "truncation_direction 'left' is not supported: this server cuts the end of a text (right)"
        raise TeiError(422, "Validation", message)


def _prompted(model: ServedModel, values: dict[str, Any]) -> list[str]:
    """The inputs, each after the model's prompt `prompt_name`; TEI's other fields checked against
    what this server does (a 422 where it cannot, never a field ignored)."""
    _check_direction(values)
    problem = dimensions_problem(model.dim, values.get("dimensions"))
    if problem is not None:
        raise TeiError(422, "Validation", problem)
    name = values.get("prompt_name")
    inputs: list[str] = values["inputs"]  # `TEI_EMBED.check` made it a list of strings
    if name is None:
        return inputs
    from embedkit.encode.prefixes import model_prompts

    prompts = model_prompts(model.encoder.path)
    if name not in prompts:
        known = ", ".join(repr(p) for p in prompts) or "none"
        raise TeiError(422, "Validation", f"prompt_name {name!r} is not one of the model's prompts ({known})")
    return [prompts[name] + text for text in inputs]


class TeiRoutes:
    """TEI's `/embed` (and `POST /`) and `/info` over `engine`; `helpers` has the app's `authorize`,
    `require_ready`, `read_object`, `embed` and its `ApiError` class."""

    def __init__(self, engine: Engine, helpers: ApiHelpers) -> None:
        self.engine = engine
        self.config = engine.config
        self.helpers = helpers

    async def answer(self, request: Request, work: Callable[[Request], Awaitable[Any]]) -> Response:
        try:
            return tei_response(await work(request))
        except TeiError as exc:
            return self.error(exc)
        except self.helpers.ApiError as exc:
            return self.error(from_api_error(exc, self.engine), exc.headers)
        except Exception as exc:  # a failure inside the model: TEI's Backend error
            log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
            line = str(exc).splitlines()[0] if str(exc) else ""
            return self.error(TeiError(424, "Backend", f"{type(exc).__name__}: {line}".rstrip(": ")))

    @staticmethod
    def error(exc: TeiError, headers: dict[str, str] | None = None) -> Response:
        return tei_response({"error": exc.message, "error_type": exc.error_type}, exc.status, headers)

    async def checked_body(self, request: Request, schema: Body, texts: str) -> dict[str, Any]:
        """The request's body checked against `schema`, TEI's errors for what does not fit; an
        empty list in the `texts` field is TEI's Empty error."""
        body = await self.helpers.read_object(request)
        if body.get(texts) == []:
            raise TeiError(400, "Empty", f"`{texts}` cannot be empty")
        try:
            return schema.check(body, self.config)
        except BodyError as exc:
            raise TeiError(exc.status, "Validation", exc.message) from None

    def engine_of(self, request: Request) -> Engine:
        """The engine of the model the path names (`/models/NAME/...`), else the first model's."""
        self.helpers.require_ready()
        name = request.path_params.get("model")
        return self.engine if name is None else self.helpers.engine_for(name)

    async def embed_work(self, request: Request) -> Any:
        self.helpers.authorize(request)
        engine = self.engine_of(request)
        model = engine.model
        assert model is not None  # every engine is ready once the first one is
        values = await self.checked_body(request, TEI_EMBED, "inputs")
        texts = _prompted(model, values)
        if not values["normalize"] and model.normalize_default:
            message = f"{model.name} L2-normalizes its vectors itself: normalize=false cannot give raw ones"
            raise TeiError(422, "Validation", message)
        if not values["truncate"]:
            longest = await engine.off_loop(lambda items: over_long(model, items), texts)
            if longest is not None:
                raise TeiError(
                    413,
                    "Validation",
                    f"Input validation error: `inputs` must have less than {model.max_seq_length} tokens "
                    f"(inputs[{longest}] has more); send truncate=true to cut it",
                )
        result = await self.helpers.embed(request, texts, engine)
        size = cut(values.get("dimensions"), model.dim)  # TEI cuts first, then normalizes
        vectors = result.vectors if size is None else result.vectors[:, :size]
        return l2_normalize(vectors) if values["normalize"] else vectors

    async def rerank_work(self, request: Request) -> list[dict[str, Any]]:
        self.helpers.authorize(request)
        self.helpers.require_ready()
        values = await self.checked_body(request, TEI_RERANK, "texts")
        _check_direction(values)
        reranker = self.engine.reranker
        if reranker is None:  # TEI's answer to /rerank on an embedding model
            message = "model is not a re-ranker model: start the server with `embedkit serve --rerank MODEL`"
            raise TeiError(424, "Backend", message)
        query, texts = values["query"], values["texts"]
        if not values["truncate"]:
            longest = await asyncio.to_thread(reranker.first_cut, query, texts)
            if longest is not None:
                raise TeiError(
                    413,
                    "Validation",
                    f"Input validation error: the query and `texts[{longest}]` are more than "
                    f"{reranker.spec.max_length} tokens together; send truncate=true to cut them",
                )
        scores = await self.engine.rerank(query, texts, raw=values["raw_scores"])
        ranks = []
        for i in np.argsort(-scores, kind="stable"):
            rank: dict[str, Any] = {"index": int(i), "score": float(scores[i])}
            if values["return_text"]:
                rank["text"] = texts[i]
            ranks.append(rank)
        return ranks

    async def info_work(self, request: Request) -> dict[str, Any]:
        from embedkit import __version__

        self.helpers.authorize(request)
        engine = self.engine_of(request)
        model = engine.model
        assert model is not None
        sizing = engine.sizing
        return {
            "model_id": model.name,
            "model_sha": None,
            "model_dtype": DTYPES.get(model.precision, model.precision),
            "model_type": {"embedding": {"pooling": model.pooling}},
            # texts the queue holds (embedkit bounds texts waiting, not requests)
            "max_concurrent_requests": self.config.max_queue_texts,
            "max_input_length": model.max_seq_length,
            "max_batch_tokens": sizing.max_batch_tokens if sizing else self.config.max_batch_tokens,
            "max_batch_requests": None,
            "max_client_batch_size": self.config.max_texts,
            "auto_truncate": False,
            "tokenization_workers": 1,
            "version": __version__,
            "sha": None,
            "docker_label": None,
            # embedkit's own: the device, batch budget, batches in flight, shapes and warm-up used,
            # and every served model's runtime, weight files' size and batch times
            "embedkit": {**self.engine.runtime_info(), "models": self.engine.models_info()},
        }

    async def embed(self, request: Request) -> Response:
        return await self.answer(request, self.embed_work)

    async def info(self, request: Request) -> Response:
        return await self.answer(request, self.info_work)

    async def rerank(self, request: Request) -> Response:
        return await self.answer(request, self.rerank_work)


def routes(engine: Engine, helpers: Any) -> list[Route]:
    """TEI's routes over `engine` (`TeiRoutes`)."""
    tei = TeiRoutes(engine, helpers)
    return [
        Route("/embed", tei.embed, methods=["POST"]),
        Route("/", tei.embed, methods=["POST"]),
        Route("/rerank", tei.rerank, methods=["POST"]),
        Route("/info", tei.info, methods=["GET"]),
        # each served model as a TEI server of its own: a TEI client picks a model by its base URL
        # (TEI serves one model a server), so http://host:port/models/NAME is the model NAME's
        Route("/models/{model:path}/embed", tei.embed, methods=["POST"]),
        Route("/models/{model:path}/info", tei.info, methods=["GET"]),
        Route("/models/{model:path}", tei.embed, methods=["POST"]),
    ]
