"""`embedkit adapt INDEX`: teach the index's dense model what its hybrid ranking knows, without labels."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from embedkit.cli.common import check_io, handle_errors
from embedkit.cli.options import DeviceOption, WaitOption
from embedkit.training.adapt.config import ADAPT_METHODS, AdaptConfig  # stdlib only: no torch

DEFAULTS = AdaptConfig()


def register(app: typer.Typer) -> None:
    app.command("adapt")(adapt)


@handle_errors
def adapt(
    index: Annotated[
        Path, typer.Argument(help="An index folder from `embedkit index` (with its lexical side).")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output model folder (sentence-transformers layout).")
    ],
    base: Annotated[
        str | None,
        typer.Option(
            "--base", help="The index's model as a torch folder (default: the one the index records)."
        ),
    ] = None,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help=f"{' or '.join(ADAPT_METHODS)}: listwise KL to the hybrid ranking, with or without "
            "InfoNCE over in-batch and hard negatives.",
        ),
    ] = DEFAULTS.method,
    queries: Annotated[
        str,
        typer.Option(
            "--queries",
            help="Pseudo-query kinds, comma-separated: ict (a sentence, cut out of its document), "
            "title (against the text), terms (a document's salient words).",
        ),
    ] = DEFAULTS.queries,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimizer steps.")] = DEFAULTS.steps,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=2, help="Pseudo queries per step.")
    ] = DEFAULTS.batch_size,
    lr: Annotated[float, typer.Option("--lr", help="Peak learning rate.")] = DEFAULTS.learning_rate,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the queries, batches and dropout.")
    ] = DEFAULTS.seed,
    eval_steps: Annotated[
        int, typer.Option("--eval-steps", min=1, help="Dev score (and fresh document vectors) every N steps.")
    ] = DEFAULTS.eval_steps,
    dev_retrieval: Annotated[
        Path | None,
        typer.Option(
            "--dev-retrieval",
            help="BEIR folder of your own judged queries: select on their nDCG@10 (default: held-out "
            "pseudo queries).",
        ),
    ] = None,
    select: Annotated[
        str | None,
        typer.Option(
            "--select",
            help="The dev signal a step is chosen on: word-drop (held-out pseudo queries with a third of "
            "their words dropped; the default), rare-cut (without their rare words), pseudo (as cut), or "
            "judged (--dev-retrieval's; its default).",
        ),
    ] = None,
    margin: Annotated[
        float,
        typer.Option(
            "--margin", help="nDCG@10 the chosen signal must gain over the base for a step to be kept."
        ),
    ] = DEFAULTS.margin,
    force: Annotated[
        bool, typer.Option("--force", help="Keep the best step even when it does not clear the margin.")
    ] = False,
    reindex: Annotated[
        bool,
        typer.Option(
            "--reindex/--no-reindex",
            help="Re-embed INDEX with the adapted model into a new version (a kill leaves the old one).",
        ),
    ] = True,
    export: Annotated[
        Path | None,
        typer.Option("--export", help="Also export the adapted model to ONNX here (parity-checked)."),
    ] = None,
    device: DeviceOption = DEFAULTS.device,
    precision: Annotated[
        str, typer.Option("--precision", help="auto (bf16 or fp16 on CUDA, fp32 on CPU), fp32, bf16, fp16.")
    ] = DEFAULTS.precision,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace a non-empty --out.")] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue a killed run from its last checkpoint in --out (same index and settings); "
            "a finished --out goes straight to re-embedding.",
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bars (the dev scores are still printed).")
    ] = False,
    wait: WaitOption = False,
) -> None:
    """Adapt the dense model of INDEX to its documents: the index's hybrid ranking of pseudo queries
    cut from them is distilled into the model (no labels, no generator), which is saved to --out and,
    by default, re-embeds INDEX.
    """
    from embedkit.console import make_console

    check_io(inputs=[index, base, dev_retrieval], folders=[out, *([export] if export else [])], wait=wait)
    config = AdaptConfig(
        base_model=base,
        method=method,
        queries=queries,
        steps=steps,
        batch_size=batch_size,
        learning_rate=lr,
        seed=seed,
        eval_steps=eval_steps,
        dev_retrieval=str(dev_retrieval) if dev_retrieval is not None else None,
        select=select,
        margin=margin,
        force=force,
        device=device,
        precision=precision,
    ).validate()
    from embedkit.training.adapt.report import before_after_table, finished_adapt, holds_model, kept_base
    from embedkit.training.adapt.run import adapt as run_adapt

    console = make_console(stderr=True)
    finished = resume and finished_adapt(out, index)
    if finished:
        typer.echo(f"{out} holds the finished adapted model: going on to what comes after it")
    else:
        result = run_adapt(
            index, out, config, overwrite=overwrite, resume=resume, progress=not quiet, note=console.print
        )
        typer.echo(before_after_table(result))
    if kept_base(out):  # the same model: an export or a re-embed would only copy what exists
        typer.echo(f"the base model was kept: {index} is unchanged, nothing exported or re-embedded")
        return
    model_for_index: Path = out
    if export is not None:
        if finished and holds_model(export, out):
            typer.echo(f"{export} already holds the adapted model's export")
        else:
            from embedkit.export import export_model

            exported = export_model(out, export, progress=not quiet, device=device)
            typer.echo(f"exported {exported.out_dir}")
        model_for_index = export
    if reindex:
        if finished and holds_model(index, model_for_index):
            typer.echo(f"{index} is already embedded with the adapted model")
            return
        from embedkit.encode.runtime import Runtime
        from embedkit.jobs.index_reembed import reembed_index

        report = reembed_index(index, model_for_index, runtime=Runtime(device), progress=not quiet)
        typer.echo(
            f"re-embedded {report.path}: {report.count:,} documents ({report.kind}), {report.seconds:.1f}s"
        )
