"""`embedkit export`: a trained or Hugging Face encoder folder to a verified ONNX folder.

The command parses options and prints; `embedkit.export.export_model` does the work. Exit 0 when
every asked-for precision passed its parity gate, 1 when one failed (figures printed, nothing
written), 2 for bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from embedkit.cli.common import check_io, handle_errors

if TYPE_CHECKING:
    from embedkit.export.parity import ParityReport


def register(app: typer.Typer) -> None:
    app.command("export")(export)


@handle_errors
def export(
    model_dir: Annotated[
        str,
        typer.Argument(
            help="Model folder to export (Hugging Face + sentence-transformers layout), or all-MiniLM-L6-v2."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write (replaced atomically if it is an export).")
    ],
    fp16: Annotated[bool, typer.Option("--fp16", help="Also write model_fp16.onnx (for GPUs).")] = False,
    int8: Annotated[
        bool, typer.Option("--int8", help="Also write model_int8.onnx (dynamic int8, for CPUs).")
    ] = False,
    opset: Annotated[
        int, typer.Option("--opset", help="ONNX opset, 14 to 20 (18 and later get no Attention fusion).")
    ] = 17,
    optimize: Annotated[
        bool, typer.Option("--optimize/--no-optimize", help="Fuse the graph with onnxruntime's optimizer.")
    ] = True,
    normalize: Annotated[
        bool,
        typer.Option("--normalize/--no-normalize", help="L2-normalise sentence vectors inside the graph."),
    ] = True,
    token_embeddings: Annotated[
        bool,
        typer.Option("--token-embeddings", help="Also output token_embeddings (batch x sequence x dim)."),
    ] = False,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="Text file, one sentence a line, added to the parity check."),
    ] = None,
    dev_sts: Annotated[
        Path | None,
        typer.Option(
            "--dev-sts", help="STS file (sentence1, sentence2, score): report Spearman per precision."
        ),
    ] = None,
    device: Annotated[
        str,
        typer.Option("--device", help="Where parity is checked: auto, cpu or cuda (int8: always the CPU)."),
    ] = "auto",
) -> None:
    """Export MODEL_DIR to ONNX with pooling and normalisation in the graph, checked against PyTorch.

    Any encoder transformers builds from its config.json (BERT, MPNet, RoBERTa, XLM-R, DeBERTa-v2,
    ModernBERT, ...) is traced; onnxruntime's transformer fusions are applied where they fit the
    architecture, its basic graph optimizations where none do, and the summary says which.
    """
    from embedkit.console import make_console
    from embedkit.export import ParityFailure, export_model

    check_io(inputs=[model_dir, calibration, dev_sts], folders=[out])
    from embedkit.encode.cross_encoder import is_cross_encoder

    if is_cross_encoder(model_dir):
        _export_cross_encoder(model_dir, out, opset, fp16 or int8 or token_embeddings, calibration, dev_sts)
        return
    console = make_console(stderr=True)
    try:
        result = export_model(
            model_dir,
            out,
            fp16=fp16,
            int8=int8,
            opset=opset,
            optimize=optimize,
            calibration=calibration,
            dev_sts=dev_sts,
            progress=sys.stderr.isatty(),
            normalize=normalize,
            token_embeddings=token_embeddings,
            device=device,
            on_step=lambda message: console.print(f"[dim]{message}[/dim]"),
        )
    except ParityFailure as failure:
        _print_parity(failure.reports, title="Parity with PyTorch (FAILED: nothing was written)")
        raise
    meta = result.metadata
    _print_parity(result.reports, title="Parity with PyTorch")
    torch_sts = meta["parity"].get("torch_sts_spearman")
    if torch_sts is not None:
        typer.echo(f"PyTorch STS Spearman on {meta['parity']['dev_sts']}: {torch_sts:.2f}")
    typer.echo(f"optimization: {meta['optimization']['applied']}")
    typer.echo(
        f"wrote {result.out_dir}: {', '.join(result.files.values())} "
        f"(dim {meta['dim']}, {meta['pooling']} pooling, normalize {str(meta['normalize']).lower()}, "
        f"inputs {', '.join(meta['input_names'])})"
    )


def _export_cross_encoder(
    model_dir: str, out: Path, opset: int, other_outputs: bool, calibration: Path | None, dev_sts: Path | None
) -> None:
    """A cross-encoder's fp32 graph, its logits gated against torch (`embedkit.export.cross_encoder`)."""
    from embedkit.errors import InputError
    from embedkit.export.cross_encoder import MAX_LOGIT_DIFFERENCE, export_cross_encoder

    if other_outputs or calibration is not None or dev_sts is not None:
        raise InputError(
            f"{model_dir} is a cross-encoder: it exports at fp32 with its logits checked against torch; "
            "--fp16, --int8, --token-embeddings, --calibration and --dev-sts are for sentence encoders"
        )
    result = export_cross_encoder(model_dir, out, opset=opset)
    typer.echo(
        f"parity with PyTorch: logits differ by at most {result.max_logit_difference:.2e} on {result.pairs} "
        f"pairs (gate {MAX_LOGIT_DIFFERENCE:.0e}): pass"
    )
    typer.echo(f"wrote {result.out_dir}: model.onnx (a cross-encoder: `search --rerank`, `serve --rerank`)")


def _print_parity(reports: list[ParityReport], title: str) -> None:
    from rich.table import Table

    from embedkit.console import make_console, print_table

    sentences = reports[0].sentences if reports else 0
    table = Table(title=f"{title}, cosine on {sentences} sentences")
    table.add_column("precision")
    table.add_column("min cosine", justify="right")
    table.add_column("mean cosine", justify="right")
    table.add_column("STS", justify="right")
    table.add_column("gate", no_wrap=True)
    table.add_column("result")
    for r in reports:
        sts = f"{r.sts_spearman:.2f}" if r.sts_spearman is not None else "-"
        result = "pass" if r.passed else "[bold red]FAIL[/bold red]"
        table.add_row(r.precision, f"{r.min_cosine:.6f}", f"{r.mean_cosine:.6f}", sts, r.gate, result)
    print_table(make_console(), table)
