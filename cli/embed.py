"""`embedkit embed`: embed a corpus of any size to a .npy file, streaming, with its ids beside it."""

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
    ModelOption,
    PrecisionOption,
    WaitOption,
)


def register(app: typer.Typer) -> None:
    app.command("embed")(embed)


@handle_errors
def embed(
    corpus: CorpusArgument,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output .npy (float32 [n, dim]); ids go to FILE.ids.txt.")
    ],
    model: ModelOption = None,
    column: ColumnOption = None,
    id_column: IdColumnOption = None,
    normalize: Annotated[
        bool | None,
        typer.Option(
            "--normalize/--no-normalize", help="L2-normalize the vectors (default: as the model does)."
        ),
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    chunk_size: ChunkOption = 10_000,
    wait: WaitOption = False,
) -> None:
    """Embed every document of CORPUS into a .npy file, in chunks, in bounded memory.

    Row i of the .npy is the corpus's i-th document; line i of FILE.ids.txt is its id. Both files
    are written atomically: an interrupted run leaves any previous output intact.
    """
    from rich.console import Console

    from embedkit.encode.streaming import CorpusOptions, embed_to_file, ids_path_for

    ids = ids_path_for(out) if out.suffix == ".npy" else None
    check_io(inputs=[corpus, model], files=[out, ids], wait=wait)
    options = CorpusOptions(column=column, id_column=id_column, chunk_size=chunk_size, batch_size=batch_size)
    report = embed_to_file(
        corpus,
        out,
        model,
        options=options,
        normalize=normalize,
        device=device,
        precision=precision,
        progress=sys.stderr.isatty(),
    )
    console = Console(highlight=False)
    console.print(
        f"embedded {report.count:,} documents ({report.dim}-d) on {report.backend}/{report.device} "
        f"in {report.seconds:.1f} s ({report.per_second:,.0f} sent/s)"
    )
    if report.truncated:
        console.print(
            f"{report.truncated:,} documents were longer than the model's maximum length and truncated"
        )
    console.print(f"wrote {report.out} and {report.ids_path}")
