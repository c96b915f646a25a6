"""`embedkit eval pseudo`: label-free retrieval scores on pseudo queries cut from the corpus itself.

`register_into(eval_app)` adds the command to the `eval` group.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import DeviceOption, PrecisionOption, runtime_from_options


def register_into(eval_app: typer.Typer) -> None:
    eval_app.command("pseudo")(pseudo)


@handle_errors
def pseudo(
    corpus: Annotated[
        Path,
        typer.Argument(
            help="Corpus of multi-sentence documents: .jsonl, .csv, .tsv, .txt, or a BEIR folder."
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Model folder (torch or ONNX export); default: bundled all-MiniLM-L6-v2."
        ),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results to this JSON file.")
    ] = None,
    queries: Annotated[int, typer.Option("--queries", min=1, help="How many pseudo queries to draw.")] = 200,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the draw (the same seed gives the same test).")
    ] = 0,
    column: Annotated[
        str | None, typer.Option("--column", help="Text column of a CSV/TSV/JSONL corpus.")
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Texts per forward pass.")] = 64,
) -> None:
    """nDCG@10, MRR@10 and Recall@10 on pseudo queries: no relevance judgments needed.

    From a sample of documents with 3 or more sentences, one sentence becomes the query and the rest of its
    document the one relevant answer, searched among all documents (the inverse cloze task, Lee et al. 2019).
    """
    from embedkit.data.corpus import read_documents

    check_io(inputs=[corpus, model], files=[json_path])
    from embedkit.encode.loading import load_encoder
    from embedkit.evaluation.pseudo_queries import build_pseudo_queries, evaluate_pseudo

    pseudo_set = build_pseudo_queries(read_documents(corpus, column), n_queries=queries, seed=seed)
    encoder = load_encoder(model, runtime=runtime_from_options(device, precision))
    metrics = evaluate_pseudo(encoder, pseudo_set, batch_size=batch_size, progress=sys.stdout.isatty())

    from rich.table import Table

    from embedkit.console import make_console, print_table

    label = f"{Path(encoder.path).name or 'model'} ({encoder.backend}, {encoder.device})"
    table = Table(title=f"pseudo queries on {corpus.name or corpus}: {label}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}")
    console = make_console()
    print_table(console, table)
    console.print(
        f"{len(pseudo_set.queries)} pseudo queries (seed {seed}) from {pseudo_set.eligible_documents} "
        f"eligible documents; {len(pseudo_set.corpus)} documents searched"
    )
    if json_path is not None:
        from embedkit.cli.eval_output import model_record
        from embedkit.storage.atomic import write_json_atomic

        write_json_atomic(
            json_path,
            {
                "task": "pseudo",
                **model_record(encoder),
                "corpus": str(corpus),
                "queries": len(pseudo_set.queries),
                "documents": len(pseudo_set.corpus),
                "metrics": metrics,
                "query_set": pseudo_set.to_json(),
            },
        )
