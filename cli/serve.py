"""`embedkit serve`: an HTTP server for embeddings (OpenAI-compatible) and search, with dynamic batching.

The command checks and prints; `embedkit.serve.server.run_server` does the work. Exit 0 after a
SIGTERM or Ctrl-C once the requests in flight are answered, 2 for bad input (a model or index
that does not load, a port in use), 1 when stopped by a second signal.
"""

from __future__ import annotations

from typing import Annotated

import typer

from embedkit.cli.common import handle_errors
from embedkit.cli.options import (
    CollectionOption,
    DeviceOption,
    PrecisionOption,
    TokenOption,
    runtime_from_options,
)
from embedkit.serve import settings


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


@handle_errors
def serve(
    model_dir: Annotated[
        str | None,
        typer.Argument(
            help="Model folder (ONNX export or torch); default: the index's model with --index, "
            "else the bundled all-MiniLM-L6-v2."
        ),
    ] = None,
    index_dirs: Annotated[
        list[str] | None,
        typer.Option(
            "--index",
            help="Index folder (`embedkit index`), or a collection `embedkit push` filled "
            "(milvus://HOST:PORT or FILE.db, with --collection), to serve at /search. Repeatable: "
            "each further folder is served with its own model, chosen by /search's `model` field.",
        ),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            help="A model folder to serve (repeatable): the first (or MODEL_DIR, or --index's model) "
            "has the index and TEI's routes, each other one its own batches, chosen by the OpenAI "
            "`model` field and listed by /v1/models.",
        ),
    ] = None,
    collection: CollectionOption = None,
    token: TokenOption = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface; set a key then).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port (0: any free one).")] = 8000,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="EMBEDKIT_API_KEY",
            show_envvar=True,
            help="Require 'Authorization: Bearer KEY' on every route but /health.",
        ),
    ] = None,
    max_batch_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-batch-tokens",
            min=1,
            help="Tokens in one batch, summed over its texts (default: 4,096 on a CPU, 32,768 on a GPU).",
        ),
    ] = None,
    max_wait_ms: Annotated[
        float,
        typer.Option("--max-wait-ms", min=0, help="How long a batch that is not full waits for more texts."),
    ] = settings.DEFAULT_MAX_WAIT_MS,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", min=1, help="Inference threads on the one loaded model (1 on a CPU; 2 on a GPU)."
        ),
    ] = 1,
    batches_in_flight: Annotated[
        int | None,
        typer.Option(
            "--batches-in-flight",
            min=1,
            help="Batches formed and not finished: padded, waiting or running (default: the workers "
            "on a CPU; 2 on a GPU, one padded while one runs).",
        ),
    ] = None,
    warmup: Annotated[
        bool | None,
        typer.Option(
            "--warmup/--no-warmup",
            help="Run every fixed batch shape once at load (default: on a GPU only).",
        ),
    ] = None,
    tokenizer_workers: Annotated[
        int | None,
        typer.Option(
            "--tokenizer-workers",
            min=0,
            max=64,
            help="Threads that tokenize ahead of the model, each with a tokenizer of its own (default: "
            "$EMBEDKIT_TOKENIZER_WORKERS, else none on a CPU and one per 4 cores, at most 4, on a GPU).",
        ),
    ] = None,
    cuda_graphs: Annotated[
        bool,
        typer.Option(
            "--cuda-graphs/--no-cuda-graphs",
            help="On a GPU, capture a CUDA graph per batch shape where ONNX Runtime can "
            "(else IO binding alone).",
        ),
    ] = True,
    max_texts: Annotated[
        int, typer.Option("--max-texts", min=1, help="Texts (or queries) in one request; more is a 413.")
    ] = settings.DEFAULT_MAX_TEXTS,
    max_queue_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-queue-tokens",
            min=1,
            help="Tokens waiting for the model beyond which a request gets 503 + Retry-After, and a "
            "request larger than that alone 413 (default: 65,536 on a CPU, an estimated 10 s of "
            "MiniLM work on 2 cores; 4,194,304 on a GPU).",
        ),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", min=0.001, help="Request body size limit in MiB; more is a 413.")
    ] = settings.DEFAULT_MAX_BODY_BYTES / 2**20,
    served_model_name: Annotated[
        str | None,
        typer.Option("--served-model-name", help="The model's name in responses (default: its card's name)."),
    ] = None,
    rerank: Annotated[
        str | None,
        typer.Option(
            "--rerank",
            help="Cross-encoder folder (a *ForSequenceClassification model, as sentence-transformers' "
            "CrossEncoder saves it) for POST /rerank and /search's rerank_depth.",
        ),
    ] = None,
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request on stderr.")] = False,
    ort_spinning: Annotated[
        bool, typer.Option("--ort-spinning", hidden=True, help="Let ONNX Runtime's CPU threads busy-wait.")
    ] = False,
) -> None:
    """Serve MODEL_DIR (or --index's model) over HTTP, with a search page at / and the API's reference
    at /docs (open http://127.0.0.1:8000/ in a browser).

    Routes: POST /v1/embeddings (OpenAI API), POST /search (with --index), POST /embed and /rerank
    (TEI's API; /rerank with --rerank), GET /health, /v1/models, /info, /metrics, /openapi.json.
    Stops on SIGTERM or Ctrl-C after answering the requests in flight.
    """
    from embedkit.extras import require_extra

    require_extra("serve", "embedkit serve")  # before the import that would fail with a traceback
    from embedkit.serve.server import run_server

    index_dir, *more_indexes = index_dirs or [None]
    folders = list(models or [])
    if index_dir is None and model_dir is None and folders:
        model_dir = folders.pop(0)  # the first model; with --index it is the index's own
    runtime = runtime_from_options(
        device,
        precision,
        spinning=ort_spinning,
        warmup=warmup,
        tokenizer_workers=tokenizer_workers,
        cuda_graphs=None if cuda_graphs else False,
    )
    config = settings.ServeConfig(
        model=model_dir,
        index=index_dir,
        collection=collection,
        token=token,
        host=host,
        port=port,
        runtime=runtime,
        api_key=api_key or None,
        max_batch_tokens=max_batch_tokens,
        max_wait_ms=max_wait_ms,
        workers=workers,
        batches_in_flight=batches_in_flight,
        max_texts=max_texts,
        max_queue_texts=max(settings.DEFAULT_MAX_QUEUE_TEXTS, max_texts),
        max_queue_tokens=max_queue_tokens,
        max_body_bytes=int(max_body_mb * 2**20),
        access_log=access_log,
        served_model_name=served_model_name,
        rerank=rerank,
        extra_models=tuple(folders),
        extra_indexes=tuple(str(i) for i in more_indexes),
    )
    config.check()
    if not config.loopback and config.api_key is None:
        typer.echo(
            f"warning: listening on {host} without an API key: anyone who can reach this port can use the "
            "server (set --api-key or EMBEDKIT_API_KEY)",
            err=True,
        )
    run_server(config, echo=typer.echo)
