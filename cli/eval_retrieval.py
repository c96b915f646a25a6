"""`embedkit eval retrieval`: nDCG@10 and more on a BEIR folder, against a model or an index, in
the mode and fusion `embedkit search` would use unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedkit.cli.common import check_search_choices, handle_errors
from embedkit.cli.eval_output import (
    check_outputs,
    encoder_label,
    interactive,
    model_record,
    print_out,
    write_json,
)
from embedkit.cli.options import (
    AlphaOption,
    BatchOption,
    CollectionOption,
    DeviceOption,
    FusionOption,
    JsonOption,
    ModelOption,
    PrecisionOption,
    TokenOption,
    open_search_index,
    runtime_from_options,
)
from embedkit.search.rerank import DEFAULT_RERANK_DEPTH

if TYPE_CHECKING:
    from embedkit.evaluation.retrieval import RetrievalReport


def register_into(eval_app: typer.Typer) -> None:
    eval_app.command("retrieval")(retrieval)


@handle_errors
def retrieval(
    beir_dir: Annotated[
        Path,
        typer.Argument(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (each may be .gz)."),
    ],
    model: ModelOption = None,
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            help="Search this index (from `embedkit index`, built from this corpus) instead of exact search; "
            "its model is the default --model. Or a collection `embedkit push` filled: milvus://HOST:PORT "
            "or FILE.db, with --collection.",
        ),
    ] = None,
    collection: CollectionOption = None,
    token: TokenOption = None,
    split: Annotated[str, typer.Option("--split", help="Which qrels/<split>.tsv to evaluate.")] = "test",
    ignore_identical_ids: Annotated[
        bool,
        typer.Option(
            "--ignore-identical-ids/--keep-identical-ids",
            help="Drop a hit whose doc id equals the query id (BEIR's default).",
        ),
    ] = True,
    per_query: Annotated[
        Path | None, typer.Option("--per-query", help="Write each judged query's metrics to this JSONL file.")
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="dense (the model), lexical (BM25), hybrid (both, fused), or all three side by side; "
            "default: what `embedkit search` does on the --index (hybrid with its calibrated fusion where "
            "it has a lexical side), without --index hybrid with the fusion a new index of this corpus "
            "would record.",
            show_default=False,
        ),
    ] = None,
    fusion: FusionOption = None,
    alpha: AlphaOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    json_path: JsonOption = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Also draw nDCG@10 per mode as bars into this PNG (needs the plots extra)."
        ),
    ] = None,
    query_prefix: Annotated[
        str | None,
        typer.Option(
            "--query-prefix",
            help="Put before each query (exact search; default: what the model card states). With "
            "--index, the index's own.",
        ),
    ] = None,
    passage_prefix: Annotated[
        str | None,
        typer.Option("--passage-prefix", help="Put before each document (exact search); as --query-prefix."),
    ] = None,
    rerank: Annotated[
        str | None,
        typer.Option("--rerank", help="Cross-encoder re-ordering each query's first hits (as in search)."),
    ] = None,
    rerank_depth: Annotated[
        int, typer.Option("--rerank-depth", min=1, help="Hits per query the --rerank model scores.")
    ] = DEFAULT_RERANK_DEPTH,
) -> None:
    """nDCG@10, MRR@10, Recall@1/10/100, MAP@100 with graded judgments, as BEIR and trec_eval compute them.

    Documents are embedded as title + " " + text; BM25 reads the same text (the index's lexical
    side with --index, else one built in memory).
    Only queries the qrels judge are evaluated; one without relevant documents scores 0.
    Ties in score rank by doc id, descending (trec_eval's order).
    """
    from embedkit.errors import InputError
    from embedkit.evaluation.retrieval_modes import evaluate_modes
    from embedkit.search.request import SEARCH_MODES

    check_search_choices(None if mode == "all" else mode, fusion, alpha)
    check_outputs([beir_dir, index, model], json_path, per_query, plot)
    if plot is not None:
        from embedkit.extras import require_extra

        require_extra("plots", "--plot")
    if index is None and (collection is not None or token is not None):
        raise InputError("--collection and --token go with --index milvus://HOST:PORT or FILE.db")
    from embedkit.remote.base import is_remote

    # a pushed collection is opened here, once for every mode; an index folder by the evaluation
    searched = open_search_index(index, collection, token) if index is not None and is_remote(index) else None
    asked = mode
    # None: the evaluator runs what `embedkit search` runs (`RetrievalEvaluator`'s default)
    modes: list[str | None] = list(SEARCH_MODES) if mode == "all" else [mode]
    try:
        evaluated = evaluate_modes(
            beir_dir,
            modes,
            index=searched or index,
            model=model,
            runtime=runtime_from_options(device, precision),
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            rerank=rerank,
            rerank_depth=rerank_depth,
            split=split,
            ignore_identical_ids=ignore_identical_ids,
            batch_size=batch_size,
            progress=interactive(),
            fusion=fusion,
            alpha=alpha,
        )
    finally:
        if searched is not None:
            searched.close()
    reports, encoder = evaluated.reports, evaluated.encoder
    modes = list(reports)
    mode = "all" if asked == "all" else modes[0]
    report, hybrid = next(iter(reports.values())), reports.get("hybrid")
    reranked = f"; the first {rerank_depth} re-ranked by {rerank}" if rerank is not None else ""
    _print_table(f"{beir_dir.name or beir_dir} ({split}): {encoder_label(encoder)}", reports, asked, reranked)
    if plot is not None:
        from embedkit.report.plots import plot_modes

        name = beir_dir.name or str(beir_dir)
        plot_modes({name: {m: reports[m].metrics["ndcg@10"] for m in modes}}, "ndcg@10", plot)
        print_out(f"wrote {plot}")
    if per_query is not None:
        _write_per_query(per_query, reports)
    if json_path is not None:
        metrics: dict[str, Any] = (
            report.metrics if len(modes) == 1 else {m: reports[m].metrics for m in modes}
        )
        write_json(
            json_path,
            {
                "task": "retrieval",
                **model_record(encoder),
                "dataset": str(beir_dir),
                "split": split,
                "search": report.search,
                "mode": mode,
                **(
                    {"fusion": hybrid.fusion, "alpha": hybrid.alpha, "fusion_source": hybrid.fusion_source}
                    if hybrid is not None
                    else {}
                ),
                **({"rerank": rerank, "rerank_depth": rerank_depth} if rerank is not None else {}),
                "ignore_identical_ids": ignore_identical_ids,
                "queries": report.queries,
                "documents": report.documents,
                "metrics": metrics,
            },
        )


def _print_table(title: str, reports: dict[str, RetrievalReport], asked: str | None, reranked: str) -> None:
    """The metrics of each mode side by side, titled with how each searched."""
    from rich.table import Table

    modes = list(reports)
    report, hybrid = next(iter(reports.values())), reports.get("hybrid")
    used = f"hybrid ({_fusion_label(hybrid.fusion, hybrid.alpha)})" if hybrid is not None else ""
    how = "" if asked else f"; {used or modes[0]}: what `embedkit search` does by default"
    if hybrid is not None:
        how += f"; fusion: {hybrid.fusion_source}"
    table = Table(title=f"{title}{how}{reranked}")
    table.add_column("metric")
    for m in modes:
        table.add_column(m if m != "hybrid" else used, justify="right")
    for name in report.metrics:
        table.add_row(name, *(f"{reports[m].metrics[name]:.4f}" for m in modes))
    print_out(table)
    print_out(f"{report.queries} judged queries, {report.documents} documents, {report.search} search")


def _write_per_query(path: Path, reports: dict[str, RetrievalReport]) -> None:
    """Each judged query's metrics, a JSON line each (with its mode where several ran)."""
    from embedkit.storage.atomic import write_text_atomic

    lines = (
        json.dumps({"query_id": q, **({"mode": m} if len(reports) > 1 else {}), **values})
        for m, report in reports.items()
        for q, values in report.per_query.items()
    )
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))


def _fusion_label(fusion: str | None, alpha: float | None) -> str:
    from embedkit.search.request import label

    if fusion in (None, "dense", "rrf"):
        return str(fusion)
    return label(fusion, alpha)
