"""`embedkit index`: embed a corpus into a FAISS index folder with its documents in SQLite."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import (
    BatchOption,
    ChunkOption,
    ColumnOption,
    CorpusArgument,
    DeviceOption,
    IdColumnOption,
    PrecisionOption,
    WaitOption,
)


def register(app: typer.Typer) -> None:
    app.command("index")(index)


@handle_errors
def index(
    corpus: CorpusArgument,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Index folder to create (or to extend with --append).")
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model folder (torch or ONNX); default: bundled all-MiniLM-L6-v2, or with --append "
            "the index's own model.",
        ),
    ] = None,
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="auto (flat under 100k documents, else HNSW; IVF-PQ if memory is short), flat, hnsw, ivf-pq",
        ),
    ] = "auto",
    append: Annotated[
        bool, typer.Option("--append", help="Add the corpus to the existing index in --out.")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing index in --out.")
    ] = False,
    gpu: Annotated[
        bool, typer.Option("--gpu", help="Build with faiss's GPU index (needs faiss with GPU support).")
    ] = False,
    lexical: Annotated[
        bool,
        typer.Option(
            "--lexical/--no-lexical",
            help="Also build a BM25 index of title + text, for `search --mode lexical|hybrid` (default on).",
        ),
    ] = True,
    column: ColumnOption = None,
    id_column: IdColumnOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    chunk_size: ChunkOption = 10_000,
    wait: WaitOption = False,
) -> None:
    """Embed CORPUS (normalized vectors, inner product) into the index folder --out.

    The folder holds index.faiss, docs.sqlite (ids, texts, metadata, and the BM25 index unless
    --no-lexical) and embedkit-index.json (model, fingerprint, kind, parameters, count). It is
    written atomically: a failed or interrupted run leaves the previous index intact. Document ids
    must be unique; with --append, an id already in the index is an error and nothing is added.
    """
    from rich.console import Console

    from embedkit.encode.streaming import CorpusOptions
    from embedkit.index import build_index

    if append and overwrite:
        from embedkit.errors import InputError

        raise InputError("--append and --overwrite exclude each other")
    check_io(inputs=[corpus, model], folders=[out], wait=wait)
    options = CorpusOptions(column=column, id_column=id_column, chunk_size=chunk_size, batch_size=batch_size)
    report = build_index(
        corpus,
        out,
        model,
        kind=kind,
        append=append,
        overwrite=overwrite,
        gpu=gpu,
        options=options,
        device=device,
        precision=precision,
        progress=sys.stderr.isatty(),
        lexical=lexical,
    )
    console = Console(highlight=False)
    params = ", ".join(f"{k}={v}" for k, v in report.params.items())
    verb = "appended" if report.appended else "indexed"
    console.print(
        f"{verb} {report.added:,} documents on {report.backend}/{report.device} in {report.seconds:.1f} s: "
        f"{report.path} now holds {report.count:,}"
    )
    console.print(f"kind {report.kind}{f' ({params})' if params else ''}: {report.reason}")
    if report.truncated:
        console.print(
            f"{report.truncated:,} documents were longer than the model's maximum length and truncated"
        )
