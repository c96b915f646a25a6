"""Calls into pymilvus: its import (quiet, or the extra to install), and its failures as one embedkit line.

Every call the Milvus adapter (`embedkit.remote.milvus`) makes runs inside `calls`, which turns
Milvus's and gRPC's exceptions into one `InputError` or `RunFailure` naming the target and the
step, a refused token into an `InputError` that says so, and Milvus Lite's own failures into what
really happened (`embedkit.remote.lite`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from embedkit.errors import InputError, RunFailure
from embedkit.extras import require_extra
from embedkit.remote.base import RemoteTarget
from embedkit.remote.lite import LITE_LOG, lite_failure, lite_failure_in, quiet_milvus_lite


def import_pymilvus():
    require_extra("milvus", "a Milvus target")
    import logging

    from embedkit.console_quiet import quiet_other_libraries

    quiet_other_libraries()  # gRPC's verbosity is read once, when it starts
    import pymilvus

    # pymilvus logs each failed call with its traceback on stderr before raising it; `calls`
    # reports every failure in one line, so that dump is only noise (a traceback, against the rules)
    logging.getLogger("pymilvus.decorators").setLevel(logging.CRITICAL)
    quiet_milvus_lite()  # Milvus Lite's own tracebacks too: `calls` says what they were about
    return pymilvus


@contextlib.contextmanager
def calls(
    target: RemoteTarget, what: str, error: type[Exception] = RunFailure, hint: str = ""
) -> Iterator[None]:
    """Milvus's exceptions as one embedkit error naming the target and the step (then `hint`);
    a refused token is always an `InputError` that says so."""
    import grpc
    from pymilvus.exceptions import MilvusException

    LITE_LOG.last = None
    try:
        yield
    except (MilvusException, grpc.RpcError) as exc:  # pymilvus lets some gRPC errors through as they are
        refusal = token_refusal(exc)
        if refusal is not None:
            raise InputError(
                f"{target} refused the token: {refusal} (check --token or MILVUS_TOKEN)"
            ) from None
        # grpcio's concrete call errors have details()/code(), its RpcError base not (grpcio 1.x);
        # pymilvus' MilvusException has `message` (pymilvus 2.4 to 3.0)
        text = exc.details() if isinstance(exc, grpc.RpcError) and hasattr(exc, "details") else None
        message = " ".join(str(text or getattr(exc, "message", "") or exc).split())
        if target.is_local_file:  # what Milvus Lite logged, not pymilvus's summary of it
            cause = LITE_LOG.last
            known = lite_failure(target.uri, what, cause) if cause else lite_failure_in(target.uri, message)
            if known is not None:
                raise known from None
            hint = ""
        raise error(f"{target}: {what} failed: {message}{hint}") from None


def token_refusal(exc: BaseException) -> str | None:
    """The server's words when it refused the token, else None.

    A Milvus proxy with authorization on checks the token in a gRPC interceptor before any method
    runs (Connect included) and answers UNAUTHENTICATED: "auth check failure, please check api key
    is correct", or "... username and password are correct" for USER:PASSWORD (milvus-io/milvus,
    internal/proxy/authentication_interceptor.go). pymilvus does not retry that code but reports a
    refused Connect as "Fail connecting to server ... or server unavailable", the gRPC error being
    its cause: the cause is what tells a refused token from a server that is down.
    """
    import grpc

    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:  # pymilvus raises `e from e`: a cause can loop
        chain.append(seen)
        # as in `milvus_error`: grpcio 1.x's RpcError base declares neither code() nor details()
        code = seen.code() if isinstance(seen, grpc.RpcError) and hasattr(seen, "code") else None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            details = seen.details() if hasattr(seen, "details") else None
            return " ".join(str(details or code.name).split())
        seen = seen.__cause__
    return None
