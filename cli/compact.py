"""`embedkit compact IDX`: drop what deletions left in an index, as a new version of it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import WaitOption


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)


@handle_errors
def compact(
    index_dir: Annotated[Path, typer.Argument(metavar="IDX", help="Index folder made by `embedkit index`.")],
    wait: WaitOption = False,
) -> None:
    """Rebuild what deletions left behind in IDX, without re-embedding.

    An HNSW graph is rebuilt from its live vectors (the masked vectors of deleted documents go), and
    the BM25 side is rebuilt from the documents, so its statistics no longer count deleted ones.
    Atomic like `index --append`. An index nothing was deleted from is left as it is.
    """
    from embedkit.index.edits import compact_index

    check_io(indexes=[index_dir], wait=wait)
    report = compact_index(index_dir)
    if report.rows == report.documents == report.count and not report.rows:
        typer.echo(f"nothing to compact: nothing was deleted from {index_dir}")
        return
    typer.echo(
        f"compacted in {report.seconds:.1f} s: dropped {report.rows:,} masked vectors, rebuilt the lexical "
        f"side; {index_dir} now holds {report.count:,}"
    )
