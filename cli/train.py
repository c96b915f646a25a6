"""`embedkit train`: adapt a sentence encoder to a corpus with miCSE (or one of its ablations)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from embedkit.cli.common import check_io, fail, handle_errors
from embedkit.cli.options import WaitOption
from embedkit.errors import EmbedkitError, InputError
from embedkit.training.config import TrainConfig  # stdlib only: no torch

DEFAULTS = TrainConfig()
METHOD_HELP = (
    "micse (AMI + momentum queue), simcse, ami-simcse or moco-simcse: miCSE's Table 3; "
    "infocse: simcse + InfoCSE's auxiliary MLM term."
)


def register(app: typer.Typer) -> None:
    app.command("train")(train)


@handle_errors
def train(
    ctx: typer.Context,
    corpus: Annotated[
        Path,
        typer.Argument(
            help="Unlabeled text: .txt (a sentence a line), .jsonl (text, title), .csv/.tsv (--column), "
            "a BEIR folder; any may be .gz."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output model folder (checkpoints live in it until done).")
    ],
    base: Annotated[
        str | None,
        typer.Option("--base", help="Base model: a local Hugging Face folder (default: all-MiniLM-L6-v2)."),
    ] = None,
    method: Annotated[str, typer.Option("--method", help=METHOD_HELP)] = DEFAULTS.method,
    reconstruction_weight: Annotated[
        float,
        typer.Option("--reconstruction-weight", min=0.0, help="Weight of InforMin-CL's L2 term (default 0)."),
    ] = DEFAULTS.reconstruction_weight,
    aux_mlm_weight: Annotated[
        float | None,
        typer.Option(
            "--aux-mlm-weight",
            min=0.0,
            help="Add InfoCSE's auxiliary MLM term with this weight to any method (infocse: 1e-5).",
        ),
    ] = None,
    aux_from: Annotated[
        Path | None,
        typer.Option("--aux-from", help="Reuse this stage-1 folder of the auxiliary MLM network."),
    ] = None,
    matryoshka: Annotated[
        str | None,
        typer.Option(
            "--matryoshka",
            help="Matryoshka (Kusupati et al. 2022): make the first dimensions of each vector work "
            "alone at these sizes, e.g. 384,256,128,64 (the model's dimension included). The vectors "
            "are rotated onto the base model's principal axes over 1,000 of the corpus's documents (a "
            "Dense module in the model folder; --set matryoshka_rotation_docs=N, 0 = none); the sizes "
            "are recorded for index --dim and the servers.",
        ),
    ] = None,
    matryoshka_weights: Annotated[
        str | None,
        typer.Option(
            "--matryoshka-weights",
            help="Weight of each --matryoshka size's loss, in its order; a smaller size's trains the "
            "model at that prefix (the paper's 1,1,1,1). Default: 1 for the whole vector, 0 for each "
            "prefix: trains as without --matryoshka (docs/dimensions.md).",
        ),
    ] = None,
    pooling: Annotated[
        str, typer.Option("--pooling", help="auto (the base model's own, else cls), mean or cls.")
    ] = DEFAULTS.pooling,
    lr: Annotated[
        float, typer.Option("--lr", help="Peak learning rate (miCSE: 3e-5).")
    ] = DEFAULTS.learning_rate,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=2, help="Sentences per step (miCSE: 64).")
    ] = DEFAULTS.batch_size,
    max_seq_length: Annotated[
        int, typer.Option("--max-seq-length", min=3, help="Training truncation in tokens (miCSE: 32).")
    ] = DEFAULTS.max_seq_length,
    epochs: Annotated[
        int, typer.Option("--epochs", min=1, help="Passes over the corpus, capped by --max-steps.")
    ] = DEFAULTS.epochs,
    max_steps: Annotated[
        int,
        typer.Option(
            "--max-steps",
            min=0,
            help="Step cap; 0: no cap. The default did no harm in-domain where longer runs did "
            "(docs/training-results.md).",
        ),
    ] = DEFAULTS.max_steps or 0,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Train on a random subset of N sentences (few-shot).")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="Seed of the --limit subset and of training (default: 0 and 42)."),
    ] = None,
    column: Annotated[
        str | None, typer.Option("--column", help="Text column of a .csv/.tsv/.jsonl corpus.")
    ] = None,
    split_sentences: Annotated[
        bool, typer.Option("--split-sentences", help="Split documents into sentences first (rule-based).")
    ] = False,
    dev_sts: Annotated[
        Path | None,
        typer.Option(
            "--dev-sts", help="sentence1/sentence2/score TSV: keep the checkpoint with the best Spearman."
        ),
    ] = None,
    views: Annotated[
        str,
        typer.Option(
            "--views",
            help="dropout: one sentence twice (the paper); crop: two random spans of a document "
            "(Contriever); ict: a sentence against the rest of its document (inverse cloze). "
            "crop and ict need documents (JSON lines, a BEIR folder); --limit then counts pairs. "
            "With crop or ict and --method simcse, --lr 1e-5 measured better than the default.",
        ),
    ] = DEFAULTS.views,
    positive_max_length: Annotated[
        int,
        typer.Option("--positive-max-length", min=3, help="Token limit of crop/ict positives (passages)."),
    ] = DEFAULTS.positive_max_length,
    dev_retrieval: Annotated[
        Path | None,
        typer.Option(
            "--dev-retrieval",
            help="BEIR folder of your own judged queries (20-50 suffice): keep the checkpoint with the "
            "best nDCG@10, or the base model when no checkpoint beats it.",
        ),
    ] = None,
    dev_pseudo: Annotated[
        int,
        typer.Option(
            "--dev-pseudo",
            min=0,
            help="Label-free selection: hold N pseudo queries (sentences cut from multi-sentence "
            "documents) out of CORPUS and keep the checkpoint with the best nDCG@10 on them.",
        ),
    ] = DEFAULTS.dev_pseudo,
    eval_steps: Annotated[
        int,
        typer.Option("--eval-steps", min=1, help="Score the dev criterion every N steps (and at the end)."),
    ] = DEFAULTS.eval_steps,
    save_steps: Annotated[
        int, typer.Option("--save-steps", min=1, help="Write a checkpoint every N steps (and at the end).")
    ] = DEFAULTS.save_steps,
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda.")] = DEFAULTS.device,
    precision: Annotated[
        str, typer.Option("--precision", help="auto (bf16 or fp16 on CUDA, fp32 on CPU), fp32, bf16, fp16.")
    ] = DEFAULTS.precision,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the unfinished run in --out.")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a non-empty --out (when the new model is complete).")
    ] = False,
    options: Annotated[
        list[str] | None,
        typer.Option("--set", help="Any other training setting as KEY=VALUE, e.g. --set ami_weight=0.005."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    wait: WaitOption = False,
    nproc: Annotated[
        int,
        typer.Option(
            "--nproc",
            min=1,
            help="Train with N processes on this machine (one per GPU, else CPU processes with gloo), "
            "through torchrun and DistributedDataParallel; each takes 1/N of every --batch-size batch.",
        ),
    ] = 1,
) -> None:
    """Train a sentence encoder on CORPUS (a few thousand unlabeled sentences) and save it to --out.

    The output folder loads with sentence-transformers, `embedkit embed/index` and `embedkit export`.
    Metrics go to OUT/metrics.jsonl; a killed run continues with --resume. Several GPUs: --nproc N,
    or `torchrun --nproc-per-node N -m embedkit.cli train ...`.
    """
    from embedkit.console import make_console

    check_io(inputs=[corpus, base, dev_sts], folders=[out], wait=wait)
    if resume and not overwrite:
        from embedkit.training.checkpoint import latest_checkpoint

        if latest_checkpoint(out) is None:  # else --resume would silently start a new run
            raise InputError(f"nothing to resume in {out}: it holds no checkpoint; leave out --resume")
    config = TrainConfig(
        base_model=base,
        method=method,
        pooling=pooling,
        reconstruction_weight=reconstruction_weight,
        aux_mlm_weight=aux_mlm_weight,
        aux_from=str(aux_from) if aux_from is not None else None,
        learning_rate=lr,
        batch_size=batch_size,
        max_seq_length=max_seq_length,
        epochs=epochs,
        max_steps=max_steps or None,
        seed=DEFAULTS.seed if seed is None else seed,
        column=column,
        split_sentences=split_sentences,
        limit=limit,
        limit_seed=DEFAULTS.limit_seed if seed is None else seed,
        device=device,
        precision=precision,
        dev_sts=str(dev_sts) if dev_sts is not None else None,
        dev_pseudo=dev_pseudo,
        dev_retrieval=str(dev_retrieval) if dev_retrieval is not None else None,
        views=views,
        positive_max_length=positive_max_length,
        eval_steps=eval_steps,
        save_steps=save_steps,
    ).with_overrides(_matryoshka_settings(matryoshka, matryoshka_weights) + (options or []))
    config.validate()
    rank = _torchrun_rank()
    if nproc > 1:
        if rank is not None:
            raise InputError("--nproc starts the processes itself: leave it out under torchrun")
        if config.batch_size % nproc:
            raise InputError(
                f"--batch-size {config.batch_size} does not divide by --nproc {nproc}: "
                "each process takes an equal slice of every batch"
            )
        from embedkit.training.launch import launch

        launch(nproc, _rank_argv(ctx))  # rank 0 prints what a single process prints
        return

    from transformers.utils import logging as hf_logging

    from embedkit.training.trainer import train as run_training

    hf_logging.disable_progress_bar()  # the weight-loading bars would bury ours
    try:
        result = run_training(corpus, out, config, progress=not quiet, resume=resume, overwrite=overwrite)
    except EmbedkitError as exc:
        if rank is None:
            raise
        raise _rank_failure(rank, exc) from None
    if rank:  # rank 0 reports for all
        return

    console = make_console()
    console.print(
        f"saved {result.out_dir} ({result.method}, {result.steps} steps on {result.sentences:,} "
        f"{'sentences' if config.views == 'dropout' else config.views + ' pairs'})"
    )
    if result.dev_score is not None:
        console.print(
            f"{result.dev_label}: {result.dev_score:.4f} at step {result.best_step} "
            f"(untrained base: {result.base_dev_score:.4f})"
        )
        if result.kept_base:
            console.print("no checkpoint beat the base model on your queries: saved the base model")
        elif result.worse_than_base:
            console.print(
                "[bold yellow]warning:[/] the trained model is WORSE than the untrained base model on the "
                "dev set; keep using the base, or train with a lower --lr or fewer --max-steps"
            )


def _matryoshka_settings(dims: str | None, weights: str | None) -> list[str]:
    """--matryoshka and --matryoshka-weights as KEY=VALUE settings (TrainConfig parses and checks them)."""
    given = {"matryoshka_dims": dims, "matryoshka_weights": weights}
    return [f"{key}={value}" for key, value in given.items() if value is not None]


def _torchrun_rank() -> int | None:
    """This process's rank when torchrun started several; None for a single process."""
    try:
        world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    except ValueError:
        return None
    return rank if world > 1 else None


def _rank_failure(rank: int, exc: EmbedkitError) -> Exception:
    """How a rank reports its failure: to `embedkit train --nproc` (a file), or one line of its own.

    Under plain torchrun, rank 0 reports bad input for all (every rank checks the same input).
    """
    from embedkit.training.launch import RANK_ERRORS_ENV, write_rank_error

    folder = os.environ.get(RANK_ERRORS_ENV)
    if folder:
        write_rank_error(Path(folder), rank, exc)
        return typer.Exit(exc.exit_code)
    if rank == 0:
        return exc
    if isinstance(exc, InputError):
        return typer.Exit(exc.exit_code)
    return fail(f"rank {rank}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", exc.exit_code)


def _rank_argv(ctx: typer.Context) -> list[str]:
    """This command line again, less --nproc: what each rank runs (`python -m embedkit.cli train ...`)."""
    positional: list[str] = []
    options: list[str] = []
    for param in ctx.command.params:
        value: Any = ctx.params.get(param.name or "")
        if param.name == "nproc" or value is None:
            continue
        if param.param_type_name == "argument":
            positional.append(str(value))
        elif getattr(param, "is_flag", False):  # click 8.x: options have it, arguments not
            options += [param.opts[0]] if value else []
        else:
            for item in value if getattr(param, "multiple", False) else [value]:
                options += [param.opts[0], str(item)]
    return [*positional, *options]
