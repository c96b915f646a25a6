"""`embedkit clean TARGET`: remove what killed runs left behind on an output, and finish what they committed.

A successful run on the same output does the same on its way; this is for a user who wants the
space back now, or will not rerun. It takes the output's write lock, so it never touches the work
of a live run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import handle_errors
from embedkit.cli.options import WaitOption


def register(app: typer.Typer) -> None:
    app.command("clean")(clean)


@handle_errors
def clean(
    target: Annotated[
        Path,
        typer.Argument(help="An output of embedkit: index, model or export folder, .npy file, experiment."),
    ],
    wait: WaitOption = False,
) -> None:
    """Remove leftovers of killed runs on TARGET: staging folders, temporary files, superseded versions.

    Also removes a killed `train --overwrite` run kept beside TARGET, and scratch folders of killed
    exports in the temporary folder. An embedding, or a part file of `embed --shard` in a parts folder,
    whose files were being renamed is completed.
    """
    from embedkit.storage.cleanup import check_clean_target, clean_target
    from embedkit.storage.locking import write_lock

    check_clean_target(target)
    with write_lock(target, wait=wait):
        removed, completed = clean_target(target)
    for path in removed:
        typer.echo(f"removed {path}")
    if completed:
        typer.echo(f"completed the interrupted write of {target}")
    if not removed and not completed:
        typer.echo(f"nothing to clean for {target}")
