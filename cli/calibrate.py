"""`embedkit calibrate INDEX`: choose the index's hybrid fusion on pseudo queries cut from its documents.

`embedkit index` calibrates a new index (and an append that grows it by half); this command does it
on demand (an index built before calibration existed, or with --no-calibrate, or from vectors) or,
with --show, prints the recorded choice and its table without computing anything. A choice that
is the fusion the index searches with already (the recorded one, else the default) is not written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import DeviceOption, PrecisionOption, WaitOption, runtime_from_options

if TYPE_CHECKING:
    from embedkit.search.request import Calibration


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


@handle_errors
def calibrate(
    index_dir: Annotated[Path, typer.Argument(help="Index folder made by `embedkit index`.")],
    show: Annotated[
        bool, typer.Option("--show", help="Print the recorded choice and its table; compute nothing.")
    ] = False,
    queries: Annotated[
        int, typer.Option("--queries", min=1, help="Pseudo queries of the kind the rule reads.")
    ] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the pseudo-query draw.")] = 0,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model folder (default: the index's; the same model).")
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    wait: WaitOption = False,
) -> None:
    """Score dense, prf, zscore, minmax and rrf on pseudo queries of INDEX and record the rule's choice."""
    from embedkit.search.request import Calibration  # noqa: F811 (the annotation's name, at run time)

    if show:
        from embedkit.index import read_index_meta

        record = read_index_meta(index_dir).get("fusion")
        if record is None:
            typer.echo(f"{index_dir}: no calibration recorded; hybrid search uses the default (prf 0.7)")
            return
        _print(Calibration.from_json(record))
        return
    from embedkit.evaluation.fusion_calibration import CalibrationConfig, calibrate_index

    check_io(indexes=[index_dir], wait=wait)
    config = CalibrationConfig(queries=queries, seed=seed)
    outcome = calibrate_index(
        index_dir, model, runtime=runtime_from_options(device, precision), config=config
    )
    _print(outcome.calibration)
    if not outcome.written:
        typer.echo(f"{index_dir} already searches with this fusion: unchanged, no new version written")


def _print(calibration: Calibration) -> None:
    from rich.table import Table

    from embedkit.console import make_console, print_table

    console = make_console()
    if calibration.table:
        kinds = list(next(iter(calibration.table.values())))
        title = "nDCG@10 x 100 on pseudo queries, by kind"
        if calibration.intervals:
            title += " [95% bootstrap interval]"
        table = Table(title=title)
        table.add_column("candidate")
        for kind in kinds:
            table.add_column(f"{kind} ({calibration.queries.get(kind, '-')})", justify="right")
        for name in calibration.table:
            table.add_row(name, *(_cell(calibration, name, k) for k in kinds))
        print_table(console, table)
    console.print(calibration.describe(), markup=False)


def _cell(calibration: Calibration, name: str, kind: str) -> str:
    """`61.65 [58.1, 65.2]`, or the mean alone in a record made before intervals were kept."""
    mean = f"{calibration.table[name][kind]:.2f}"
    interval = calibration.intervals.get(name, {}).get(kind)
    return f"{mean} [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else mean
