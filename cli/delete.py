"""`embedkit delete IDX ID...`: delete documents from an index, as a new version of it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import WaitOption


def register(app: typer.Typer) -> None:
    app.command("delete")(delete)


@handle_errors
def delete(
    index_dir: Annotated[Path, typer.Argument(metavar="IDX", help="Index folder made by `embedkit index`.")],
    ids: Annotated[
        list[str] | None, typer.Argument(metavar="ID", help="Ids of the documents to delete.")
    ] = None,
    ids_file: Annotated[
        Path | None,
        typer.Option(
            "--ids", help="File of document ids to delete, one a line (blank lines skipped; .gz ok)."
        ),
    ] = None,
    wait: WaitOption = False,
) -> None:
    """Delete documents (every row of each) from IDX: vectors, text and BM25 in one new version.

    Atomic like `index --append`: a failed or killed run leaves the index as it was. An id the index
    does not hold is an error and nothing is deleted. flat and ivf-pq indexes drop the vectors; an
    HNSW graph keeps them masked (filtered out at search) until `embedkit compact IDX`.
    """
    from embedkit.errors import InputError
    from embedkit.index.edits import delete_documents

    wanted = list(ids or [])
    if ids_file is not None:
        from embedkit.data.textfiles import text_lines

        wanted += [line.strip() for _, line in text_lines(ids_file) if line.strip()]
    if not wanted:
        raise InputError("no document ids to delete: give ID... or --ids FILE")
    check_io(inputs=[ids_file], indexes=[index_dir], wait=wait)
    report = delete_documents(index_dir, wanted)
    note = ""
    if report.masked:
        note = (
            f"; {report.masked:,} vectors of deleted documents stay in the HNSW graph, filtered out at "
            f"search, until `embedkit compact {index_dir}`"
        )
    typer.echo(
        f"deleted {report.documents:,} document{'s' if report.documents != 1 else ''} "
        f"({report.rows:,} row{'s' if report.rows != 1 else ''}) in {report.seconds:.1f} s: "
        f"{index_dir} now holds {report.count:,}{note}"
    )
