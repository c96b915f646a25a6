"""The routes beside the API's own: the search page (`GET /`), `/openapi.json`, `/docs`, the page's
static files, and text-embeddings-inference's routes (`tei`).

The pages are plain HTML, CSS and JavaScript shipped in `embedkit/serve/static/` (package data; no
CDN, no external fonts). They hold no data: the page script asks for the API key once (kept in the
tab's sessionStorage) and fetches everything through the API with it, so the pages are served
without the key and a server with a key discloses nothing to a visitor without it. A
Content-Security-Policy of 'self' keeps the page from loading or sending anything elsewhere.
"""

from __future__ import annotations

from importlib import resources

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from embedkit.serve import tei
from embedkit.serve.engine import Engine
from embedkit.serve.openapi import OPERATIONS, openapi_document
from embedkit.serve.route_helpers import ApiHelpers

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css", ".js": "text/javascript"}
STATIC_FILES = ("search.js", "docs.js", "common.js", "style.css")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# Every path that `MetricsMiddleware` counts by name besides the app's own.
PATHS = tuple(dict.fromkeys(op.path for op in OPERATIONS))


def static_file(name: str) -> Response:
    """A file of `embedkit/serve/static` with its media type and the security headers."""
    data = resources.files("embedkit.serve").joinpath("static").joinpath(name).read_bytes()
    media = MEDIA_TYPES[name[name.rindex(".") :]]
    return Response(data, media_type=media, headers=SECURITY_HEADERS)


def extra_routes(engine: Engine, helpers: ApiHelpers) -> list[Route]:
    """The page, docs, static, openapi and TEI routes of an app over `engine`."""
    from embedkit import __version__

    async def search_page(request: Request) -> Response:
        return static_file("index.html")

    async def docs_page(request: Request) -> Response:
        return static_file("docs.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            raise helpers.ApiError(404, f"no static file {name!r}", "not_found")
        return static_file(name)

    async def openapi(request: Request) -> Response:
        helpers.authorize(request)
        body = orjson.dumps(openapi_document(engine.config, __version__))
        return Response(body, media_type="application/json")

    return [
        Route("/", search_page, methods=["GET"]),
        Route("/docs", docs_page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *tei.routes(engine, helpers),
    ]
