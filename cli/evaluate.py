"""`embedkit eval`: score a model on STS pairs (`sts`) and on a BEIR retrieval folder (`retrieval`).

The data is read and checked before the model is loaded, so bad input fails in a second.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from embedkit.cli.common import check_search_choices, fail, handle_errors
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

    _check_outputs([*files, model], json_path)
    evaluator = StsEvaluator(files, batch_size=batch_size, progress=_interactive())
    encoder = _load(model, device, precision)
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
    _print(table)
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
        _write_json(
            json_path,
            {"task": "sts", **_model_info(encoder), "metrics": {STS_METRIC: mean}, "files": files_out},
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

    _check_outputs([file, model], json_path)
    task = sts_retrieval_task(file)  # bad input fails before the model loads
    encoder = _load(model, device, precision)
    scores = evaluate_sts_retrieval(encoder, file, batch_size=batch_size, exclude=exclude)

    from rich.table import Table

    table = Table(title=f"{file.name}: {len(task.queries)} queries, {len(task.sentences)} sentences")
    table.add_column("model")
    for name in scores:
        table.add_column(name, justify="right")
    table.add_row(encoder_label(encoder), *(f"{v:.2f}" for v in scores.values()), style="bold")
    for name, published in PUBLISHED_STS_RETRIEVAL.items():
        table.add_row(f"{name}, published", *(f"{v:.2f}" for v in published))
    _print(table)
    if json_path is not None:
        _write_json(
            json_path,
            {
                "task": "sts-retrieval",
                **_model_info(encoder),
                "dataset": str(file),
                "queries": len(task.queries),
                "sentences": len(task.sentences),
                "exclude": exclude,
                "metrics": scores,
            },
        )


@eval_app.command("retrieval")
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
) -> None:
    """nDCG@10, MRR@10, Recall@1/10/100, MAP@100 with graded judgments, as BEIR and trec_eval compute them.

    Documents are embedded as title + " " + text; BM25 reads the same text (the index's lexical
    side with --index, else one built in memory).
    Only queries the qrels judge are evaluated; one without relevant documents scores 0.
    Ties in score rank by doc id, descending (trec_eval's order).
    """
    from embedkit.errors import InputError
    from embedkit.evaluation import RetrievalEvaluator

    check_search_choices(None, fusion, alpha)
    _check_outputs([beir_dir, index, model], json_path, per_query, plot)
    if plot is not None:
        from embedkit.extras import require_extra

        require_extra("plots", "--plot")
    meta, searched = None, None
    if index is not None:
        from embedkit.remote.base import is_remote

        if is_remote(index):  # a pushed collection, opened once for every mode
            searched = open_search_index(index, collection, token)
            meta = searched.meta
        else:
            from embedkit.index import read_index_meta

            searched = Path(index)
            meta = read_index_meta(searched)  # fail on a bad folder before loading anything
    elif collection is not None or token is not None:
        raise InputError("--collection and --token go with --index milvus://HOST:PORT or FILE.db")
    from embedkit.errors import InputError
    from embedkit.index.search import SEARCH_MODES

    if mode is not None and mode not in (*SEARCH_MODES, "all"):
        raise InputError(f"unknown --mode {mode!r}: use {', '.join(SEARCH_MODES)} or all")
    asked = mode
    mode = mode or _search_default_mode(searched, meta, fusion)
    modes = list(SEARCH_MODES) if mode == "all" else [mode]
    evaluators = {
        m: RetrievalEvaluator(
            beir_dir,
            split=split,
            index=searched,
            ignore_identical_ids=ignore_identical_ids,
            batch_size=batch_size,
            progress=_interactive(),
            mode=m,
            fusion=fusion,
            alpha=alpha,
        )
        for m in modes
    }
    if meta is None:
        encoder = _load(model, device, precision)
    else:
        from embedkit.index.folder import open_model_for

        encoder = open_model_for(meta, model, device, precision)  # the index's model unless --model
    from embedkit.encode.caching import CachingEncoder
    from embedkit.encode.prefixes import check_recorded, recorded_prefixes, resolve_prefixes

    if meta is None:
        prefixes = resolve_prefixes(encoder.path, query_prefix, passage_prefix)
    else:
        prefixes = recorded_prefixes(meta)
        check_recorded(prefixes, query_prefix, passage_prefix, "index")
    for evaluator in evaluators.values():
        evaluator.prefixes = prefixes
    encoder = CachingEncoder(encoder)  # `all` embeds the corpus once for dense and hybrid
    try:
        reports = {m: e.evaluate(encoder) for m, e in evaluators.items()}
    finally:
        if searched is not None and not isinstance(searched, Path):
            searched.close()
    report = next(iter(reports.values()))

    from rich.table import Table

    hybrid = reports.get("hybrid")
    used = f"hybrid ({_fusion_label(hybrid.fusion, hybrid.alpha)})" if hybrid is not None else ""
    how = "" if asked else f"; {used or mode}: what `embedkit search` does by default"
    if hybrid is not None:
        how += f"; fusion: {hybrid.fusion_source}"
    table = Table(title=f"{beir_dir.name or beir_dir} ({split}): {encoder_label(encoder)}{how}")
    table.add_column("metric")
    for m in modes:
        table.add_column(m if m != "hybrid" else used, justify="right")
    for name in report.metrics:
        table.add_row(name, *(f"{reports[m].metrics[name]:.4f}" for m in modes))
    _print(table)
    _print(f"{report.queries} judged queries, {report.documents} documents, {report.search} search")
    if plot is not None:
        from embedkit.report.plots import plot_modes

        name = beir_dir.name or str(beir_dir)
        plot_modes({name: {m: reports[m].metrics["ndcg@10"] for m in modes}}, "ndcg@10", plot)
        _print(f"wrote {plot}")
    if per_query is not None:
        from embedkit.storage.atomic import write_text_atomic

        lines = (
            json.dumps({"query_id": q, **({"mode": m} if len(modes) > 1 else {}), **values})
            for m in modes
            for q, values in reports[m].per_query.items()
        )
        write_text_atomic(per_query, "".join(f"{line}\n" for line in lines))
    if json_path is not None:
        metrics: dict[str, Any] = (
            report.metrics if len(modes) == 1 else {m: reports[m].metrics for m in modes}
        )
        _write_json(
            json_path,
            {
                "task": "retrieval",
                **_model_info(encoder),
                "dataset": str(beir_dir),
                "split": split,
                "search": report.search,
                "mode": mode,
                **(
                    {"fusion": hybrid.fusion, "alpha": hybrid.alpha, "fusion_source": hybrid.fusion_source}
                    if hybrid is not None
                    else {}
                ),
                "ignore_identical_ids": ignore_identical_ids,
                "queries": report.queries,
                "documents": report.documents,
                "metrics": metrics,
            },
        )


def _search_default_mode(searched: Any, meta: dict[str, Any] | None, fusion: str | None) -> str:
    """The mode `embedkit search` runs on this index without --mode; without an index, hybrid
    (what `embedkit index` then `search` gives)."""
    if meta is None:
        return "hybrid"
    if not isinstance(searched, Path):  # an open (remote) index
        return searched.default_mode(fusion)
    from embedkit.index.calibration import default_mode
    from embedkit.index.lexical import lexical_settings

    return default_mode(meta, lexical_settings(meta.get("lexical")) is not None, fusion)


def _fusion_label(fusion: str | None, alpha: float | None) -> str:
    from embedkit.index.calibration import label

    if fusion in (None, "dense", "rrf"):
        return str(fusion)
    return label(fusion, alpha)


def _load(model: str | None, device: str, precision: str | None) -> Any:
    from embedkit.encode.loading import load_encoder

    return load_encoder(model, device=device, precision=precision)


def encoder_label(encoder: Any) -> str:
    from embedkit.encode.default_onnx import recorded_model_path
    from embedkit.encode.model_folder import DEFAULT_BASE_MODEL, default_base_model_path
    from embedkit.errors import InputError

    path = getattr(encoder, "path", None)
    name = Path(path).name if path else "model"
    try:
        if path and recorded_model_path(encoder) == default_base_model_path().resolve():
            name = DEFAULT_BASE_MODEL
    except InputError:  # the bundled model's package is absent: this is not it
        pass
    return f"{name} ({encoder.backend}, {encoder.device})"


def _model_info(encoder: Any) -> dict[str, Any]:
    path = getattr(encoder, "path", None)
    return {
        "model": str(path) if path else None,
        "fingerprint": encoder.fingerprint,
        "backend": encoder.backend,
        "device": str(encoder.device),
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from embedkit.storage.atomic import write_json_atomic

    write_json_atomic(path, data)


def _check_outputs(inputs: list[Any], *paths: Path | None) -> None:
    """Fail before the work, not after it, when an output cannot be written or is an input."""
    from embedkit.cli.common import check_io
    from embedkit.errors import InputError

    for path in paths:
        if path is not None and path.is_dir():
            raise InputError(f"output {path} is a folder; give a file name")
    check_io(inputs=inputs, files=paths)


def _interactive() -> bool:
    return sys.stdout.isatty()


def _print(renderable: Any) -> None:
    from rich.table import Table

    from embedkit.console import make_console, print_table

    console = make_console()
    if isinstance(renderable, Table):
        print_table(console, renderable)
    else:
        console.print(renderable)


from embedkit.cli.pseudo import register_into as _register_pseudo  # noqa: E402

_register_pseudo(eval_app)
