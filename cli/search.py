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
from embedkit.cli.options import (
    AlphaOption,
    CollectionOption,
    DeviceOption,
    FusionOption,
    GpuOption,
    PrecisionOption,
    TokenOption,
    open_search_index,
    runtime_from_options,
)
from embedkit.search.hits import HIT_FIELDS
from embedkit.search.rerank import DEFAULT_RERANK_DEPTH

if TYPE_CHECKING:
    from embedkit.encode.runtime import Runtime
    from embedkit.search.hits import Hit
    from embedkit.search.request import SearchRequest


def register(app: typer.Typer) -> None:
    app.command("search")(search)


@handle_errors
def search(
    index_dir: Annotated[
        str,
        typer.Argument(
            help="Index folder made by `embedkit index`, or where `embedkit push` sent one: "
            "milvus://HOST:PORT or a Milvus Lite FILE.db (with --collection)."
        ),
    ],
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
    gpu: GpuOption = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="dense (FAISS), lexical (BM25) or hybrid (both, fused); default: hybrid where the "
            "index has a lexical side, else dense.",
        ),
    ] = None,
    fusion: FusionOption = None,
    alpha: AlphaOption = None,
    collection: CollectionOption = None,
    token: TokenOption = None,
    where: Annotated[
        str | None,
        typer.Option(
            "--where",
            help='Only documents whose metadata pass EXPR: year >= 2020 and lang in ["en", "de"] '
            "(=, !=, <, <=, >, >=, in, and, or, not, parentheses; dates as 2024-01-31; integers "
            "exact, 64-bit). At most 32 levels of and/or/not and 1,000 comparisons (an in list's "
            "values count).",
        ),
    ] = None,
    passages: Annotated[
        bool,
        typer.Option(
            "--passages",
            help="Show each hit's best passage instead of its snippet (an index built with --passages); "
            "--json adds it as `passage`.",
        ),
    ] = False,
    include: Annotated[
        str | None,
        typer.Option(
            "--include",
            help="The fields of each hit in --json besides rank, id and score, comma-separated, of "
            f"{', '.join(HIT_FIELDS)} (default: all but text, the whole document).",
        ),
    ] = None,
    rerank: Annotated[
        str | None,
        typer.Option(
            "--rerank",
            help="Cross-encoder folder (a *ForSequenceClassification model, as sentence-transformers' "
            "CrossEncoder saves it) that re-orders the first --rerank-depth hits; score becomes its score.",
        ),
    ] = None,
    rerank_depth: Annotated[
        int,
        typer.Option("--rerank-depth", min=1, help="Hits per query the --rerank model scores."),
    ] = DEFAULT_RERANK_DEPTH,
) -> None:
    """Search INDEX_DIR for QUERY (or each line of --queries): ranked ids, scores and texts.

    Each hit shows its title and a snippet: the part of its text that best answers the query, as
    one line, the query's words in bold.

    \b
    Examples:
      embedkit search my-index "how do I rotate the keys"
      embedkit search my-index "rotate keys" -k 5 --where 'year >= 2020'
      embedkit search my-index --queries questions.txt --json --mode dense
      embedkit search my-index "rotate keys" --json --include title,text,metadata
      embedkit search my-index "rotate keys" --rerank models/cross-encoder

    --device cuda (or cuda:N) embeds the queries and searches a flat or ivf-pq index with faiss on
    that GPU (it needs faiss with GPU support: the gpu extra); auto and cpu search with faiss on the CPU.
    """
    from rich.markup import escape

    from embedkit.console import make_console
    from embedkit.index.faiss_gpu import check_gpu_k
    from embedkit.search import pipeline
    from embedkit.search.hits import DEFAULT_FIELDS, checked_fields, hit_record

    runtime = runtime_from_options(device, precision, gpu=gpu)
    check_search_choices(mode, fusion, alpha)  # before the index loads
    fields = checked_fields(include.split(",") if include is not None else DEFAULT_FIELDS)
    if where is not None:
        from embedkit.index.where import parse

        parse(where)  # a syntax error before the index and the model load
    texts = _queries(query, queries_file)
    settings = {"mode": mode, "fusion": fusion, "alpha": alpha, "where": where, "passages": passages}
    if rerank is not None:
        from embedkit.encode.cross_encoder import read_cross_encoder

        read_cross_encoder(rerank)  # a folder that is no cross-encoder: before the index loads
    with open_search_index(index_dir, collection, token, runtime) as index:
        # an unknown field or a wrong type, a mode the index cannot run: before the model loads
        request = index.request(k, snippets=True, **settings)
        if rerank is not None:
            request = _reranking(request, rerank, rerank_depth, runtime)
        check_gpu_k(request.k, index.faiss_device)
        encoder = index.encoder(model, runtime=runtime)
        split = f" in {len(index.rows):,} passages" if index.passages else ""
        ranking = f"{request.mode} search"
        if request.mode == "hybrid":
            source = "" if fusion is not None or alpha is not None else ", the index's default"
            ranking = f"hybrid search ({request.fusion}, dense weight {request.alpha}{source})"
        if request.rerank is not None:
            ranking += f"; the first {rerank_depth} re-ranked by {rerank}"
        make_console(stderr=True).print(
            escape(
                f"{index_dir}: {index.document_count:,} documents{split} ({index.kind}); {ranking}; "
                f"model {encoder.path} ({encoder.backend}, {encoder.device})"
                + (f"; faiss on {index.faiss_device}" if index.faiss_device != "cpu" else "")
            )
        )
        if passages and not index.passages:
            make_console(stderr=True).print(
                escape(f"note: {index_dir} holds whole documents: no passages to show")
            )
        how = request.record()
        results = pipeline.search(index.store, texts, encoder, request, index.prefixes)
    for text, hits in zip(texts, results, strict=True):
        if request.mode == "lexical" and not hits:
            note = f"note: no lexical hits for {text!r}: no word of it is in the index (or all are stopwords)"
            make_console(stderr=True).print(escape(note))
    if as_json:
        for text, hits in zip(texts, results, strict=True):
            records = [hit_record(rank, h, fields) for rank, h in enumerate(hits, 1)]
            typer.echo(json.dumps({"query": text, **how, "hits": records}, ensure_ascii=False))
        return
    _print_tables(texts, results, passages)


def _reranking(request: SearchRequest, model: str, depth: int, runtime: Runtime) -> SearchRequest:
    """`request` asking for the candidates a cross-encoder re-ranks, with it as its last stage."""
    from embedkit.encode.cross_encoder import CrossEncoderModel
    from embedkit.search.rerank import Rerank

    return Rerank(CrossEncoderModel(model, device=runtime.device), depth, request.k).request(request)


def _queries(query: str | None, queries_file: Path | None) -> list[str]:
    from embedkit.errors import InputError

    if (query is None) == (queries_file is None):
        raise InputError("give one query text or --queries FILE (not both)")
    if query is not None:
        if not query.strip():
            raise InputError("the query is empty")
        from embedkit.data.values import check_text

        return [check_text(query, "the query")]  # an argument's bytes that are not UTF-8
    from embedkit.data.textfiles import text_lines

    texts = [line.strip() for _, line in text_lines(queries_file, "queries file") if line.strip()]
    if not texts:
        raise InputError(f"no queries in {queries_file}: it is empty or every line is blank")
    return texts


def _print_tables(texts: list[str], results: list[list[Hit]], passages: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    from embedkit.console import make_console, print_table
    from embedkit.data.plain_text import one_line

    console = make_console()
    for text, hits in zip(texts, results, strict=True):
        table = Table(title=f"[bold]{escape(text)}[/bold]", title_justify="left")
        table.add_column("#", justify="right")
        table.add_column("id")
        table.add_column("title", max_width=30)  # the text, the snippet, gets the rest
        table.add_column("score", justify="right")
        table.add_column("text")
        for rank, hit in enumerate(hits, 1):
            if passages and hit.passage is not None:
                shown = escape(one_line(hit.passage.text))  # the whole passage: what was asked to see
            else:  # every hit has one: the window of its text that best answers the query
                shown = _snippet_markup(hit.snippet or "")
            title = one_line(hit.document.title) if hit.document is not None else ""
            table.add_row(str(rank), escape(hit.id), escape(title), f"{hit.score:.4f}", shown)
        print_table(console, table)


def _snippet_markup(snippet: str) -> str:
    """A snippet's HTML (the query's terms in <b>, the rest HTML-escaped) as rich markup."""
    import html
    import re

    from rich.markup import escape

    parts = re.split(r"(<b>.*?</b>)", snippet)
    return "".join(
        f"[bold]{escape(html.unescape(p[3:-4]))}[/bold]" if p.startswith("<b>") else escape(html.unescape(p))
        for p in parts
    )
