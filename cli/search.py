"""`embedkit search`: query an index folder; ranked ids, scores and texts as a table or JSON lines.

Start-up time matters here (one query from a cold process): only the index, its documents' rows
and the model are loaded, and an ONNX model never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from embedkit.cli.common import check_search_choices, handle_errors
from embedkit.cli.options import DeviceOption, PrecisionOption

if TYPE_CHECKING:
    from embedkit.index import Hit

TEXT_WIDTH = 160  # characters of a document shown in the table


def register(app: typer.Typer) -> None:
    app.command("search")(search)


@handle_errors
def search(
    index_dir: Annotated[Path, typer.Argument(help="Index folder made by `embedkit index`.")],
    query: Annotated[str | None, typer.Argument(help="Query text (or use --queries).")] = None,
    queries_file: Annotated[
        Path | None,
        typer.Option("--queries", "-q", help="File of queries, one a line (blank lines skipped; .gz ok)."),
    ] = None,
    k: Annotated[int, typer.Option("-k", "--top-k", min=1, help="Results per query.")] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per query (JSON lines).")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model to embed queries with (default: the index's; must be the same model).",
        ),
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    gpu: Annotated[
        bool, typer.Option("--gpu", help="Search with faiss's GPU index (flat and ivf-pq).")
    ] = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="dense (FAISS), lexical (BM25) or hybrid (both, fused); default: hybrid where the "
            "index has a lexical side, else dense.",
        ),
    ] = None,
    fusion: Annotated[
        str,
        typer.Option(
            "--fusion",
            help="Hybrid fusion: zscore (per-query standardised scores, weighted by --alpha), rrf "
            "(reciprocal rank) or minmax.",
        ),
    ] = "zscore",
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0, help="Dense weight of zscore/minmax fusion.")
    ] = 0.5,
) -> None:
    """Search INDEX_DIR for QUERY (or each line of --queries): ranked ids, scores and texts."""
    from rich.console import Console

    from embedkit.index import SearchIndex

    check_search_choices(mode, fusion)
    texts = _queries(query, queries_file)
    with SearchIndex.load(index_dir, gpu=gpu) as index:
        encoder = index.encoder(model, device=device, precision=precision)
        mode = mode or index.default_mode()
        Console(stderr=True, highlight=False).print(
            f"{index_dir}: {len(index):,} documents ({index.kind}); {mode} search; model {encoder.path} "
            f"({encoder.backend}, {encoder.device})"
        )
        results = index.search_text(texts, k=k, encoder=encoder, mode=mode, fusion=fusion, alpha=alpha)
    for text, hits in zip(texts, results, strict=True):
        if mode == "lexical" and not hits:
            typer.echo(f"note: no lexical hits for {text!r}: no word of it is in the index (or all are "
                       "stopwords)", err=True)
    if as_json:
        for text, hits in zip(texts, results, strict=True):
            typer.echo(
                json.dumps({"query": text, "hits": [_hit_json(rank, h) for rank, h in enumerate(hits, 1)]})
            )
        return
    _print_tables(texts, results)


def _queries(query: str | None, queries_file: Path | None) -> list[str]:
    from embedkit.errors import InputError

    if (query is None) == (queries_file is None):
        raise InputError("give one query text or --queries FILE (not both)")
    if query is not None:
        if not query.strip():
            raise InputError("the query is empty")
        return [query]
    from embedkit.data.textfiles import text_lines

    texts = [line.strip() for _, line in text_lines(queries_file) if line.strip()]
    if not texts:
        raise InputError(f"no queries in {queries_file}: it is empty or every line is blank")
    return texts


def _hit_json(rank: int, hit: Hit) -> dict[str, object]:
    doc = hit.document
    record: dict[str, object] = {"rank": rank, "id": hit.id, "score": round(hit.score, 6)}
    for side, value in (("dense_score", hit.dense_score), ("lexical_score", hit.lexical_score)):
        record[side] = None if value is None else round(value, 6)
    if doc is not None:
        record.update(title=doc.title, text=doc.text)
        if doc.metadata:
            record["metadata"] = doc.metadata
    return record


def _print_tables(texts: list[str], results: list[list[Hit]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    for text, hits in zip(texts, results, strict=True):
        table = Table(title=f"[bold]{escape(text)}[/bold]", title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("id")
        table.add_column("score", justify="right")
        table.add_column("text")
        for rank, hit in enumerate(hits, 1):
            body = hit.document.full_text if hit.document is not None else ""
            shown = body if len(body) <= TEXT_WIDTH else body[: TEXT_WIDTH - 1] + "…"
            table.add_row(str(rank), escape(hit.id), f"{hit.score:.4f}", escape(shown))
        console.print(table)
