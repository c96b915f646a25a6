"""`embedkit verify INDEX`: every byte of every file of the live version against its recorded checksum.

A load checks the checksums at a bounded cost (small files in full, samples of large ones); this
reads everything, for a scheduled check or after a restore from backup, then checks the files
against each other as every load does (`embedkit.index.integrity.read_version`), so an index
`verify` passes is one `search` opens. Exit 0: all files match; 1: a file is damaged or missing,
or the files contradict each other (named on the error line); 2: not an index, or one too old to
have checksums.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import fail, handle_errors


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)


@handle_errors
def verify(
    index_dir: Annotated[Path, typer.Argument(help="Index folder made by `embedkit index`.")],
) -> None:
    """Check every file of INDEX against the checksums recorded when it was written (exit 1 if damaged)."""
    from embedkit.index.integrity import IndexDamaged, verify_index
    from embedkit.storage.checksums import ChecksumMismatch

    try:
        done = verify_index(index_dir)
    except (ChecksumMismatch, IndexDamaged) as exc:
        named = "restore" in str(exc) or "rebuild" in str(exc)  # the line names its repair already
        repair = "" if named else "; rebuild the index or restore it from a backup"
        raise fail(f"{exc}{repair}", 1) from None
    typer.echo(f"verified {done.folder}: {done.files} files, {done.bytes:,} bytes, all match their checksums")
    from embedkit.index import read_index_meta
    from embedkit.search.request import Calibration

    record = read_index_meta(index_dir).get("fusion")  # what hybrid search uses by default
    typer.echo(Calibration.from_json(record).describe() if record else "fusion: not calibrated (prf 0.7)")
