"""`embedkit eval`: score a model on STS pairs (`sts`) and on a BEIR retrieval folder (`retrieval`).

The data is read and checked before the model is loaded, so bad input fails in a second.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import fail, handle_errors
from embedkit.cli.eval_output import (
    check_outputs,
    encoder_label,
    interactive,
    load_model,
    model_record,
    print_out,
    write_json,
)
from embedkit.cli.options import (
    BatchOption,
    DeviceOption,
    JsonOption,
    ModelOption,
    PrecisionOption,
    runtime_from_options,
)

eval_app = typer.Typer(
    help="Evaluate a model: STS correlation or BEIR retrieval metrics.",
    no_args_is_help=False,  # a bare `embedkit eval` is a usage error: one line, exit 2
)


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


@eval_app.command("sts")
@handle_errors
def sts(
    files: Annotated[
        list[Path],
        typer.Argument(help="STS files with sentence1, sentence2, score: .tsv, .csv or .jsonl, or .gz."),
    ],
    model: ModelOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    json_path: JsonOption = None,
) -> None:
    """Spearman x 100 of cosine similarity against gold scores, per file and the mean (SentEval's "all")."""
    from embedkit.evaluation import STS_METRIC, StsEvaluator

    check_outputs([*files, model], json_path)
    evaluator = StsEvaluator(files, batch_size=batch_size, progress=interactive())
    encoder = load_model(model, runtime_from_options(device, precision))
    results = evaluator.evaluate(encoder)
    mean = sum(r.spearman_cosine for r in results) / len(results)
    undefined = [r.name for r in results if math.isnan(r.spearman_cosine)]

    from rich.table import Table

    table = Table(title=f"STS: {encoder_label(encoder)}")
    table.add_column("file")
    table.add_column("pairs", justify="right")
    table.add_column(STS_METRIC, justify="right")
    for r in results:
        shown = "undefined" if r.name in undefined else f"{r.spearman_cosine:.2f}"
        table.add_row(r.name, str(r.pairs), shown)
    if len(results) > 1 and not undefined:
        table.add_row("mean", str(sum(r.pairs for r in results)), f"{mean:.2f}", style="bold")
    print_out(table)
    if undefined:  # a mean without them would not be comparable with other runs' means
        raise fail(
            f"Spearman is undefined for {', '.join(undefined)}: the model gives every pair the same "
            "cosine similarity (a collapsed or broken model); no mean and no JSON written",
            1,
        )
    if json_path is not None:
        files_out = [
            {"path": str(r.path), "name": r.name, "pairs": r.pairs, STS_METRIC: r.spearman_cosine}
            for r in results
        ]
        write_json(
            json_path,
            {"task": "sts", **model_record(encoder), "metrics": {STS_METRIC: mean}, "files": files_out},
        )


# Published Recall@1/5/10 on STS-B test by this protocol (DiffCSE Table 5; InfoCSE Table 11).
PUBLISHED_STS_RETRIEVAL = {
    "SimCSE (BERT-base)": (74.23, 94.85, 95.88),
    "DiffCSE (BERT-base)": (79.38, 96.91, 98.97),
    "InfoCSE (BERT-base)": (80.41, 100.0, 100.0),
}


@eval_app.command("sts-retrieval")
@handle_errors
def sts_retrieval(
    file: Annotated[
        Path, typer.Argument(help="STS file with sentence1, sentence2, score (e.g. STS-B test).")
    ],
    model: ModelOption = None,
    exclude: Annotated[
        str,
        typer.Option(
            "--exclude",
            help="row: only the query's own row is left out (the protocol as described); text: every "
            "row holding the query's text (STS-B test repeats 31 of its 97 query sentences elsewhere).",
        ),
    ] = "row",
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    json_path: JsonOption = None,
) -> None:
    """In-domain retrieval on an STS file, DiffCSE's protocol: Recall@1/5/10 x 100.

    Every sentence of the file is the corpus; each pair with gold score 5.0 is a query (its first
    sentence) whose target is its second sentence; the query's own row is excluded, and a
    sentence whose text equals the target's counts as the target.
    """
    from embedkit.evaluation.sts_retrieval import evaluate_sts_retrieval, sts_retrieval_task

    check_outputs([file, model], json_path)
    task = sts_retrieval_task(file)  # bad input fails before the model loads
    encoder = load_model(model, runtime_from_options(device, precision))
    scores = evaluate_sts_retrieval(encoder, file, batch_size=batch_size, exclude=exclude)

    from rich.table import Table

    table = Table(title=f"{file.name}: {len(task.queries)} queries, {len(task.sentences)} sentences")
    table.add_column("model")
    for name in scores:
        table.add_column(name, justify="right")
    table.add_row(encoder_label(encoder), *(f"{v:.2f}" for v in scores.values()), style="bold")
    for name, published in PUBLISHED_STS_RETRIEVAL.items():
        table.add_row(f"{name}, published", *(f"{v:.2f}" for v in published))
    print_out(table)
    if json_path is not None:
        write_json(
            json_path,
            {
                "task": "sts-retrieval",
                **model_record(encoder),
                "dataset": str(file),
                "queries": len(task.queries),
                "sentences": len(task.sentences),
                "exclude": exclude,
                "metrics": scores,
            },
        )


from embedkit.cli.eval_retrieval import register_into as _register_retrieval  # noqa: E402
from embedkit.cli.pseudo import register_into as _register_pseudo  # noqa: E402

_register_retrieval(eval_app)
_register_pseudo(eval_app)
