"""Run the app on uvicorn: bind, load the model in the background, drain on SIGTERM or Ctrl-C.

The socket is bound here before uvicorn starts, so a port in use is a one-line `InputError` and
`--port 0` gets a free port whose URL is printed. The model's folder is checked before (a wrong
path is an error, and no URL is printed); the model loads after the socket listens:
/health answers 503 until the warm-up batch is done. On SIGTERM or SIGINT uvicorn stops
accepting connections and waits for the requests in flight; then the batcher finishes its queue
and `run_server` returns (exit status 0). A second signal stops without waiting.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

import uvicorn

from embedkit.errors import InputError, RunFailure
from embedkit.serve.settings import ServeConfig


def bind(host: str, port: int) -> socket.socket:
    """A bound TCP socket on host:port (IPv4 or IPv6), or an `InputError` saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot resolve --host {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart at once after a stop
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def run_server(config: ServeConfig, echo: Callable[[str], None] = print) -> None:
    """Serve until SIGTERM or SIGINT, then finish the requests in flight and return.

    `echo` gets the lines to show: the URL at once, the model, device and precision when ready.
    A model that fails to load stops the server and its error is raised here.
    """
    from embedkit.serve.app import create_app
    from embedkit.serve.engine import Engine
    from embedkit.serve.served_model import ServedModel

    config.check()
    ServedModel.check(config)
    sock = bind(config.host, config.port)
    url = f"{config.url.rsplit(':', 1)[0]}:{sock.getsockname()[1]}"
    _log_to_stderr()
    engine = Engine(config)
    uv_config = uvicorn.Config(
        create_app(engine),
        http=json_error_protocol(),
        log_level="info" if config.access_log else "warning",
        access_log=config.access_log,
        lifespan="on",
        timeout_keep_alive=30,  # clients that pool connections (openai, httpx) reuse them for longer
    )
    server = GracefulServer(uv_config, on_signal=lambda: echo("stopping: finishing the requests in flight"))

    def ready(model: ServedModel) -> None:
        echo(f"ready: {url} model {model.describe()}")
        echo(engine.describe_sizing())
        for other in engine.others.values():
            assert other.model is not None
            echo(f"  and model {other.model.describe()}: batched on its own, chosen by the `model` field")
        if engine.reranker is not None:
            echo(f"  re-ranker {engine.reranker.path} ({engine.reranker.backend}, {engine.reranker.device})")

    def failed(exc: BaseException) -> None:
        server.should_exit = True

    engine.on_ready, engine.on_error = ready, failed
    what = f"index {config.index}" if config.index else f"model {config.model or 'all-MiniLM-L6-v2'}"
    echo(f"embedkit serve: {url} (loading {what})")
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if engine.error is not None:
        raise engine.error
    if server.force_exit:
        raise RunFailure("stopped on a second signal without waiting for the requests in flight")
    echo("stopped")


def json_error_protocol() -> type | str:
    """uvicorn's httptools protocol, except that a request it cannot parse as HTTP gets the API's
    JSON error body, not uvicorn's plain text (its one hook for that is the protocol class)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # no httptools: uvicorn's h11 protocol, with its own plain-text 400
        return "auto"
    import orjson

    class JsonErrorProtocol(HttpToolsProtocol):
        def send_400_response(self, msg: str) -> None:
            error = {"message": f"not an HTTP request: {msg}", "type": "invalid_request_error"}
            body = orjson.dumps({"error": {**error, "param": None, "code": None}})
            head = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in self.server_state.default_headers:
                head.extend([name, b": ", value, b"\r\n"])
            head.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
            head.append(b"connection: close\r\n\r\n")
            self.transport.write(b"".join(head) + body)
            self.transport.close()

    return JsonErrorProtocol


def _log_to_stderr() -> None:
    """The server's own lines (a client that left, a newer index version, a failure's traceback)
    on stderr at INFO, whatever uvicorn's --access-log level is."""
    log = logging.getLogger("embedkit.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("embedkit serve: %(levelname)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


class GracefulServer(uvicorn.Server):
    """uvicorn's Server, except that SIGTERM/SIGINT end it with a normal return.

    uvicorn raises a caught signal again once it has shut down, so that the process ends "by"
    that signal (status 143 for SIGTERM); a server that drained its requests has done what the
    signal asked, so here it returns and the command exits 0.
    """

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_signal = on_signal

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop(self, sig: int, frame: object) -> None:
        if self.should_exit:
            self.force_exit = True  # a second signal: stop waiting
            return
        self.should_exit = True
        if self.on_signal is not None:
            self.on_signal()
