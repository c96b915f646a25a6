"""`embedkit push`: send an index folder (or `embed --shard` part files) to a search server (Milvus)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import handle_errors
from embedkit.cli.options import CollectionOption, ColumnOption, IdColumnOption, TokenOption


def register(app: typer.Typer) -> None:
    app.command("push")(push)


@handle_errors
def push(
    source: Annotated[
        str,
        typer.Argument(
            help="Index folder (from `embedkit index`), then the target URI; with --from-vectors the URI."
        ),
    ],
    uri: Annotated[
        str | None,
        typer.Argument(help="milvus://HOST:PORT, or a Milvus Lite file path ending in .db."),
    ] = None,
    collection: CollectionOption = None,
    append: Annotated[
        bool, typer.Option("--append", help="Send only the rows the collection lacks (resume a push).")
    ] = False,
    token: TokenOption = None,
    from_vectors: Annotated[
        Path | None,
        typer.Option("--from-vectors", help="Push the part files of `embed --shard` in this folder instead."),
    ] = None,
    corpus: Annotated[
        Path | None,
        typer.Option("--corpus", help="The corpus the parts were embedded from (--from-vectors)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="With --from-vectors: the parts' model folder, where the path they record is not on this "
            "machine (default: the recorded one).",
        ),
    ] = None,
    column: ColumnOption = None,
    id_column: IdColumnOption = None,
    dense_index: Annotated[
        str, typer.Option("--dense-index", help="Server-side vector index: FLAT (exact) or HNSW.")
    ] = "FLAT",
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Documents per request.")] = 1000,
) -> None:
    """Push SOURCE's documents and vectors into a Milvus collection (no embedding again).

    `embedkit push INDEX URI`, or `embedkit push --from-vectors PARTS --corpus CORPUS URI`. Rows are
    upserted under their index row: pushing again (or with --append, after a killed push) leaves
    each document once. A collection of another model or dimension is refused.
    """
    from embedkit.errors import InputError
    from embedkit.remote.base import RemoteTarget

    if from_vectors is not None:
        if uri is not None:
            raise InputError("with --from-vectors give only the target URI (the parts replace the index)")
        if corpus is None:
            raise InputError("--from-vectors needs --corpus, the corpus the parts were embedded from")
        uri, index_dir = source, None
    else:
        if uri is None:
            raise InputError("give an index folder and a target URI: embedkit push INDEX URI")
        if corpus is not None or model is not None:
            raise InputError("--corpus and --model go with --from-vectors (an index records its own)")
        index_dir = Path(source)
    target = RemoteTarget.parse(uri, collection, token)
    progress = sys.stderr.isatty()
    if index_dir is not None:
        from embedkit.remote.push import push_index

        report = push_index(
            index_dir,
            target,
            append=append,
            dense_index=dense_index,
            batch_size=batch_size,
            progress=progress,
        )
    else:
        from embedkit.jobs.streaming import CorpusOptions
        from embedkit.remote.push import push_vectors

        options = CorpusOptions(column=column, id_column=id_column)
        report = push_vectors(
            from_vectors,
            corpus,  # type: ignore[arg-type]
            target,
            model=model,
            append=append,
            dense_index=dense_index,
            batch_size=batch_size,
            progress=progress,
            options=options,
        )
    rate = report.sent / report.seconds if report.seconds > 0 else 0.0
    typer.echo(
        f"pushed {report.sent:,} of {report.total:,} documents to {target} in {report.seconds:.1f}s "
        f"({rate:,.0f} docs/s)",
        err=True,
    )
