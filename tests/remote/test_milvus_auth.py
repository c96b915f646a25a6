"""A Milvus server that refuses the token: `push`, `search`, `eval retrieval` say so in one line, exit 2.

Milvus Lite has no authentication, so a stand-in gRPC server answers as a Milvus 2.4/2.5 proxy with
authorization on answers a wrong token: its authentication interceptor (milvus-io/milvus,
internal/proxy/authentication_interceptor.go, `AuthenticationInterceptor`) rejects every
MilvusService call, Connect included, before the method runs, with gRPC status UNAUTHENTICATED and
"auth check failure, please check api key is correct" for a token without ':', "auth check failure,
please check username and password are correct" for USER:PASSWORD, "missing authorization in
header" without one. A second variant answers Connect and refuses what follows (a token revoked
between calls), which pymilvus reports through another path (a bare gRPC error).
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.jobs.index_options import IndexOptions

grpc = pytest.importorskip("grpc")
pytest.importorskip("pymilvus")

API_KEY_REFUSED = "auth check failure, please check api key is correct"
PASSWORD_REFUSED = "auth check failure, please check username and password are correct"


class RefusingProxy(grpc.GenericRpcHandler):
    """Every call refused as the proxy's interceptor refuses it; the tokens sent are recorded."""

    def __init__(self, answer_connect: bool) -> None:
        self.answer_connect = answer_connect
        self.tokens: list[str] = []  # the decoded `authorization` metadata of each call
        self.methods: list[str] = []

    def service(self, details):
        from pymilvus.grpc_gen import common_pb2, milvus_pb2

        self.methods.append(details.method)
        sent = dict(details.invocation_metadata).get("authorization")
        token = base64.b64decode(sent).decode("utf-8") if sent else None
        if token is not None:
            self.tokens.append(token)
        if self.answer_connect and details.method == "/milvus.proto.milvus.MilvusService/Connect":
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: milvus_pb2.ConnectResponse(status=common_pb2.Status()),
                request_deserializer=milvus_pb2.ConnectRequest.FromString,
                response_serializer=milvus_pb2.ConnectResponse.SerializeToString,
            )
        if token is None:
            words = "missing authorization in header"
        else:
            words = PASSWORD_REFUSED if ":" in token else API_KEY_REFUSED

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, words)

        return grpc.unary_unary_rpc_method_handler(refuse)


@pytest.fixture(params=[False, True], ids=["refused-at-connect", "refused-after-connect"])
def proxy(request) -> Iterator[tuple[str, RefusingProxy]]:
    handler = RefusingProxy(answer_connect=request.param)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"milvus://127.0.0.1:{port}", handler
    server.stop(grace=None)


@pytest.fixture
def beir_and_index(tmp_path: Path, tiny_bert: Path) -> tuple[Path, Path]:
    from eval_data import write_beir

    from embedkit import build_index

    beir = write_beir(tmp_path / "beir")
    build_index(beir, tmp_path / "index", tiny_bert, IndexOptions(kind="flat", device="cpu"))
    return beir, tmp_path / "index"


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _assert_refusal(result, uri: str, words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {uri} collection ") and "refused the token" in lines[0]
    assert words in lines[0] and "MILVUS_TOKEN" in lines[0]
    assert "is the server up" not in lines[0]


def test_push_with_a_refused_token_writes_nothing(beir_and_index, proxy, monkeypatch) -> None:
    _, index = beir_and_index
    uri, handler = proxy
    before = _digest(index)
    _assert_refusal(
        CliRunner().invoke(app, ["push", str(index), uri, "--token", "not-the-key"]), uri, API_KEY_REFUSED
    )
    assert handler.tokens and set(handler.tokens) == {"not-the-key"}  # the token reached the server
    # the same from $MILVUS_TOKEN, a USER:PASSWORD this time
    monkeypatch.setenv("MILVUS_TOKEN", "root:wrong")
    _assert_refusal(CliRunner().invoke(app, ["push", str(index), uri]), uri, PASSWORD_REFUSED)
    assert handler.tokens[-1] == "root:wrong"
    assert not any(m.endswith(("/CreateCollection", "/Insert", "/Upsert")) for m in handler.methods)
    assert _digest(index) == before


def test_search_and_eval_with_a_refused_token_write_nothing(tmp_path: Path, beir_and_index, proxy) -> None:
    beir, _ = beir_and_index
    uri, handler = proxy
    runner = CliRunner()
    search = runner.invoke(app, ["search", uri, "shock wave", "-c", "beir", "--token", "stale"])
    _assert_refusal(search, uri, API_KEY_REFUSED)
    before = _digest(beir)
    report, per_query = tmp_path / "report.json", tmp_path / "per-query.jsonl"
    evaluated = runner.invoke(
        app,
        ["eval", "retrieval", str(beir), "--index", uri, "-c", "beir", "--token", "stale"]
        + ["--json", str(report), "--per-query", str(per_query)],
    )
    _assert_refusal(evaluated, uri, API_KEY_REFUSED)
    assert not report.exists() and not per_query.exists() and _digest(beir) == before
    assert handler.tokens and set(handler.tokens) == {"stale"}


def test_the_refusal_is_all_a_real_run_prints(proxy) -> None:
    """A process of its own: stderr is the terminal's, where pymilvus's own logging would show."""
    uri, handler = proxy
    run = subprocess.run(
        [sys.executable, "-m", "embedkit.cli.app", "search", uri, "shock wave", "--token", "stale"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and run.stdout == "", run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {uri} collection "), run.stderr
    assert "refused the token: " + API_KEY_REFUSED in lines[0] and "Traceback" not in run.stderr
    assert set(handler.tokens) == {"stale"}
