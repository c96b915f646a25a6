"""What `embedkit.serve.app` hands the routes beside its own (`page`, `tei`): the error answered
as JSON (`ApiError`) and the app's helpers (`ApiHelpers`). Apart from both, so the routes name
them without importing the app that imports the routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from embedkit.serve.engine import Embedded, Engine
from embedkit.serve.served_model import ServedModel


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


@dataclass(frozen=True)
class ApiHelpers:
    """What the extra routes take from the app: its key check, readiness, body reader, batched
    embedding (abandoned when the client goes), a served model's engine by name and its error class."""

    authorize: Callable[[Request], None]
    require_ready: Callable[[], ServedModel]
    read_object: Callable[[Request], Awaitable[dict[str, Any]]]
    embed: Callable[..., Awaitable[Embedded]]  # (request, texts, engine=None)
    ApiError: type[ApiError]
    engine_for: Callable[[str | None], Engine]
