"""`embedkit experiment`: the miCSE low-shot protocol (sizes x seeds x methods) as one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import WaitOption
from embedkit.errors import InputError


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """`"1000,4000"` -> (1000, 4000); `InputError` naming `what` for anything else."""
    try:
        values = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise InputError(f"{what} is empty")
    return values


def parse_seeds(text: str) -> tuple[int, ...]:
    """`"3"` means seeds 0, 1, 2; a list with commas (`"0,7"`) names the seeds themselves."""
    if "," in text:
        return parse_int_list(text, "--seeds")
    (count,) = parse_int_list(text, "--seeds")
    if count < 1:
        raise InputError(f"--seeds must be at least 1, got {count}")
    return tuple(range(count))


def parse_methods(text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


def register(app: typer.Typer) -> None:
    app.command("experiment")(experiment)


@handle_errors
def experiment(
    corpus: Annotated[
        Path,
        typer.Argument(
            help="Training corpus: .txt (one text per line), .jsonl, .csv, .tsv, or a BEIR folder."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Experiment folder: run results, tables, plots.")],
    sizes: Annotated[str, typer.Option("--sizes", help="Training-set sizes, comma-separated.")] = "1000,4000",
    seeds: Annotated[
        str, typer.Option("--seeds", help="Number of seeds (3 = seeds 0,1,2), or a comma-separated list.")
    ] = "3",
    methods: Annotated[
        str,
        typer.Option(
            "--methods",
            help="Comma-separated: simcse, ami-simcse, moco-simcse, micse, infocse (docs/training.md).",
        ),
    ] = "simcse,micse",
    eval_sts: Annotated[
        list[Path] | None, typer.Option("--eval-sts", help="STS file to score (repeatable), e.g. STS-B dev.")
    ] = None,
    eval_retrieval: Annotated[
        list[Path] | None,
        typer.Option("--eval-retrieval", help="BEIR folder to score by nDCG@10 (repeatable)."),
    ] = None,
    eval_sts_retrieval: Annotated[
        list[Path] | None,
        typer.Option(
            "--eval-sts-retrieval",
            help="STS file scored by in-domain retrieval, R@1/5/10 (repeatable; InfoCSE Table 11).",
        ),
    ] = None,
    eval_pseudo: Annotated[
        bool,
        typer.Option("--eval-pseudo", help="Label-free retrieval on pseudo queries cut from the corpus."),
    ] = False,
    pseudo_queries: Annotated[
        int, typer.Option("--pseudo-queries", min=1, help="How many pseudo queries to draw.")
    ] = 200,
    train_option: Annotated[
        list[str] | None,
        typer.Option(
            "--train-option",
            "-t",
            help="KEY=VALUE for every run's training config (repeatable), e.g. ami_weight=1e-3.",
        ),
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="Base model folder (default: bundled all-MiniLM-L6-v2).")
    ] = None,
    pooling: Annotated[
        str | None, typer.Option("--pooling", help="mean, cls or auto (the base folder's own).")
    ] = None,
    split_sentences: Annotated[
        bool, typer.Option("--split-sentences", help="Split documents into sentences before sampling.")
    ] = False,
    column: Annotated[
        str | None, typer.Option("--column", help="Text column of a CSV/TSV/JSONL corpus.")
    ] = None,
    device: Annotated[str | None, typer.Option("--device", help="auto, cpu or cuda.")] = None,
    no_base: Annotated[
        bool, typer.Option("--no-base", help="Leave out the untrained base model's row.")
    ] = False,
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Write PNG plots (needs matplotlib).")
    ] = True,
    wait: WaitOption = False,
) -> None:
    """Train and evaluate every (size, seed, method); tabulate mean ± std over seeds, as miCSE's Table 2.

    Each run trains on its own subset (the seed draws it) and keeps only its scores (OUT/runs/NAME.json).

    Rerunning the same command resumes: finished runs are not redone.

    Writes OUT/table.md, OUT/table.csv, OUT/table.json and OUT/plots/*.png.
    """
    evals = [*(eval_sts or []), *(eval_retrieval or []), *(eval_sts_retrieval or [])]
    check_io(inputs=[corpus, base, *evals], folders=[out], wait=wait)
    from transformers.utils import logging as hf_logging

    from embedkit.training.experiment import ExperimentConfig, run_experiment, train_config_from_options

    hf_logging.disable_progress_bar()  # one bar per weight load and save, dozens of runs: only noise

    options = list(train_option or [])
    direct = {"base_model": base, "pooling": pooling, "column": column, "device": device}
    options += [f"{key}={value}" for key, value in direct.items() if value is not None]
    if split_sentences:
        options.append("split_sentences=true")
    config = ExperimentConfig(
        sizes=parse_int_list(sizes, "--sizes"),
        seeds=parse_seeds(seeds),
        methods=parse_methods(methods),
        eval_sts=tuple(str(p) for p in eval_sts or []),
        eval_retrieval=tuple(str(p) for p in eval_retrieval or []),
        eval_sts_retrieval=tuple(str(p) for p in eval_sts_retrieval or []),
        eval_pseudo=eval_pseudo,
        pseudo_queries=pseudo_queries,
        include_base=not no_base,
        train=train_config_from_options(options),
    )
    from embedkit.console import make_console

    console = make_console()
    result = run_experiment(
        corpus,
        out,
        config,
        progress=console.is_terminal,
        notify=console.print,
    )
    _report(result, out, plots, console)


def _report(result: Any, out: Path, plots: bool, console: Any) -> None:
    from embedkit.console import print_table
    from embedkit.report.tables import rich_tables, write_reports

    for table in rich_tables(result.table):
        print_table(console, table)
    paths = list(write_reports(result.table, out).values())
    if plots:
        from embedkit.report.plots import plots_available, write_plots

        if plots_available():
            paths += write_plots(result.table, out / "plots")
        else:
            from embedkit.extras import missing_extra_message

            console.print(f"plots skipped: {missing_extra_message('plots', '--plots')}")
    reused = f", {len(result.reused)} found finished" if result.reused else ""
    console.print(f"{len(result.trained)} runs done{reused}; wrote " + ", ".join(str(p) for p in paths))

