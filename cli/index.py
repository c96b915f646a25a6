"""`embedkit index`: embed a corpus into a FAISS index folder with its documents in SQLite, or build
one from part files embedded before (`--from-vectors`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedkit.cli.common import check_io, handle_errors, print_truncated
from embedkit.cli.options import (
    BatchOption,
    ChunkOption,
    ColumnOption,
    DeviceOption,
    GpuOption,
    IdColumnOption,
    PrecisionOption,
    WaitOption,
    runtime_from_options,
)

if TYPE_CHECKING:
    from embedkit.index.build_report import IndexReport


def register(app: typer.Typer) -> None:
    app.command("index")(index)


@handle_errors
def index(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Index folder to create (or to extend with --append).")
    ],
    corpus: Annotated[
        Path | None,
        typer.Argument(
            metavar="CORPUS",
            help="Corpus: .txt (one document a line), .jsonl, .csv, .tsv (each may be .gz), a BEIR "
            "folder, a folder of .txt, .md, .pdf, .html and .docx files, one document each, or one .md, "
            ".pdf, .html or .docx file, one document (or --corpus).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model folder (torch or ONNX); default: bundled all-MiniLM-L6-v2, or with --append "
            "the index's own model, with --from-vectors the parts' model (same fingerprint if given).",
        ),
    ] = None,
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="auto (flat under 100k documents, else HNSW; IVF-PQ if memory is short), flat, hnsw, ivf-pq",
        ),
    ] = "auto",
    quantize: Annotated[
        str | None,
        typer.Option(
            "--quantize",
            metavar="int8|binary",
            help="Search compact codes (int8: 4x less memory, binary: 32x) with a flat or hnsw index, then "
            "rescore the best candidates with the float vectors kept on disk (memory-mapped); "
            "docs/quantization.md. An append keeps the index's.",
        ),
    ] = None,
    dim: Annotated[
        int | None,
        typer.Option(
            "--dim",
            min=1,
            help="Keep the first N dimensions of each vector, renormalized (a Matryoshka model's "
            "recorded sizes keep its quality best; docs/dimensions.md); default: the model's own. "
            "Queries are cut the same way; an append keeps the index's.",
        ),
    ] = None,
    append: Annotated[
        bool, typer.Option("--append", help="Add the corpus to the existing index in --out.")
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing index in --out.")
    ] = False,
    upsert: Annotated[
        bool,
        typer.Option(
            "--upsert", help="With --append: documents whose ids the index holds replace them (new version)."
        ),
    ] = False,
    sync: Annotated[
        bool,
        typer.Option(
            "--sync",
            help="Keep the index in --out in step with CORPUS: documents unchanged since the last build "
            "(same id and content hash) kept, changed and new ones embedded, those gone deleted, in one "
            "new version (none if nothing changed); no index there: a new one.",
        ),
    ] = False,
    gpu: GpuOption = False,
    lexical: Annotated[
        bool,
        typer.Option(
            "--lexical/--no-lexical",
            help="Also build a BM25 index of title + text, for `search --mode lexical|hybrid` (default on).",
        ),
    ] = True,
    column: ColumnOption = None,
    id_column: IdColumnOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    chunk_size: ChunkOption = 10_000,
    wait: WaitOption = False,
    from_vectors: Annotated[
        Path | None,
        typer.Option(
            "--from-vectors",
            help="Build from the part files in this folder (`embed --shard` or `--ray`), without embedding; "
            "the corpus supplies the documents, in the same order.",
        ),
    ] = None,
    corpus_option: Annotated[
        Path | None, typer.Option("--corpus", help="The corpus, as an option (the same as the argument).")
    ] = None,
    calibrate: Annotated[
        bool,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="Choose the hybrid fusion on pseudo queries cut from the documents (a new index, and "
            "an append that grows it by half; docs/hybrid.md). Default on; `embedkit calibrate` later.",
        ),
    ] = True,
    passages: Annotated[
        str | None,
        typer.Option(
            "--passages",
            metavar="N[:OVERLAP]",
            help="Split long documents into passages of N model tokens (consecutive ones sharing OVERLAP) "
            "and rank documents by their best passage; default: whole documents (cut at the model's "
            "maximum length). An append keeps the index's setting.",
        ),
    ] = None,
    query_prefix: Annotated[
        str | None,
        typer.Option(
            "--query-prefix",
            help="Text put before every query embedded for this index (recorded in it); default: what the "
            "model card states (e5's 'query: ', bge's instruction), else none.",
        ),
    ] = None,
    passage_prefix: Annotated[
        str | None,
        typer.Option(
            "--passage-prefix",
            help="Text put before every document or passage embedded (recorded); default as --query-prefix.",
        ),
    ] = None,
    reindex_lexical: Annotated[
        bool,
        typer.Option(
            "--reindex-lexical",
            help="Rebuild the BM25 side of the index in --out from its documents (no corpus, no "
            "re-embedding): for an index built with --no-lexical or by an earlier embedkit.",
        ),
    ] = False,
) -> None:
    """Embed CORPUS (normalized vectors, inner product) into the index folder --out.

    Each build, --append or --overwrite writes a new version folder v-N/ (the FAISS vectors, the
    documents in SQLite, the tantivy BM25 index unless --no-lexical, checksums) and then moves the
    CURRENT pointer to it in one step: a failed or interrupted run leaves the previous version in
    use. Document ids must be unique; with --append, an id already in the index is an error and
    nothing is added, unless --upsert: then the corpus's document replaces the index's (see
    `embedkit delete`). --sync embeds only what changed since the last build and deletes what
    CORPUS no longer holds (a folder's files by path, a JSONL or BEIR corpus's records by id).
    With --from-vectors DIR the vectors come from DIR's part files (checked: all parts present,
    none corrupt, the corpus's ids in the same order, one model) and nothing is embedded.
    --device cuda (or cuda:N) runs the model and builds a flat or ivf-pq index with faiss on that
    GPU (faiss with GPU support: the gpu extra); the index is saved in faiss's CPU
    form either way.
    """
    from embedkit.errors import InputError
    from embedkit.jobs.index_build import build_index
    from embedkit.jobs.index_options import IndexOptions
    from embedkit.jobs.streaming import CorpusOptions

    runtime = runtime_from_options(device, precision, gpu=gpu)
    if reindex_lexical:
        _reindex_lexical(out, corpus or corpus_option or from_vectors, append or overwrite or sync, wait)
        return
    if corpus is not None and corpus_option is not None and corpus != corpus_option:
        raise InputError(f"two corpora given: {corpus} and --corpus {corpus_option}")
    corpus = corpus or corpus_option
    if corpus is None:
        raise InputError("missing the corpus: give CORPUS (or --corpus CORPUS)")
    if append and overwrite:
        raise InputError("--append and --overwrite exclude each other")
    if upsert and not append:
        raise InputError("--upsert replaces documents of an existing index: use it with --append")
    options = CorpusOptions(column=column, id_column=id_column, chunk_size=chunk_size, batch_size=batch_size)
    if from_vectors is not None:
        if passages is not None or query_prefix is not None or passage_prefix is not None:
            raise InputError(
                "--from-vectors indexes the parts' vectors, embedded before: drop --passages and the prefixes"
            )
        if sync:
            raise InputError("--from-vectors builds a new index from the parts' vectors: drop --sync")
        building = {"kind": kind, "overwrite": overwrite, "runtime": runtime, "lexical": lexical}
        building |= {"dim": dim, "quantize": quantize}
        _from_vectors(from_vectors, corpus, out, model, append, building | {"options": options}, wait)
        return
    check_io(inputs=[corpus, model], indexes=[out], wait=wait)
    settings = IndexOptions(
        kind=kind,
        dim=dim,
        quantize=quantize,
        append=append,
        upsert=upsert,
        overwrite=overwrite,
        sync=sync,
        lexical=lexical,
        calibrate=calibrate,
        passages=passages,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        runtime=runtime,
        corpus=options,
    )
    report = build_index(corpus, out, model, settings, progress=sys.stderr.isatty())
    skipped = [
        f"{n:,} {what}"
        for n, what in (
            (report.blank, "blank"),
            (report.hidden_files, "hidden files or folders"),
            (report.binary_files, "binary files"),
            (len(report.skipped_files), "files past a reader's bounds"),
        )
        if n
    ]
    notes = f" ({', '.join(skipped)} skipped)" if skipped else ""
    notes += f" ({report.replaced:,} of them replacing documents)" if upsert else ""
    split = f" as {report.passages:,} passages" if report.passages else ""
    faiss = f", faiss on {report.faiss_device}" if report.faiss_device != "cpu" else ""
    where = f"{report.backend}/{report.device}{faiss}"
    if sync:  # the summary a sync is read for: what it embedded, kept and deleted
        what = f"embedded {report.added:,}, kept {report.kept:,}, deleted {report.deleted:,}"
    else:
        what = f"{'appended' if report.appended else 'indexed'} {report.added:,} documents"
    _print_built(report, f"{what}{split}{notes} on {where}")
    _print_file_notes(report)


_SKIPPED_SHOWN = 20  # files skipped past a reader's bounds named one a line; the rest counted


def _print_file_notes(report) -> None:
    """On stderr, one line a file skipped past a reader's bounds (its reason), then the files read
    from another encoding than UTF-8."""
    from embedkit.console import make_console

    lines = [f"note: skipped {reason}" for reason in report.skipped_files[:_SKIPPED_SHOWN]]
    if len(report.skipped_files) > _SKIPPED_SHOWN:
        hidden = len(report.skipped_files) - _SKIPPED_SHOWN
        lines.append(f"note: skipped {hidden:,} more files past a reader's bounds")
    if report.recoded_files:
        more = f" and {len(report.recoded_files) - 1:,} more" if len(report.recoded_files) > 1 else ""
        lines.append(
            f"note: files not in UTF-8 were read in the encoding they are in: {report.recoded_files[0]}{more}"
        )
    console = make_console(stderr=True)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _from_vectors(
    folder: Path,
    corpus: Path,
    out: Path,
    model: str | None,
    append: bool,
    building: dict[str, Any],
    wait: bool,
) -> None:
    from embedkit.errors import InputError
    from embedkit.jobs.index_from_parts import build_index_from_vectors

    if append:
        raise InputError("--from-vectors builds a new index: drop --append (or --overwrite to replace one)")
    check_io(inputs=[corpus, model, folder], indexes=[out], wait=wait)
    report = build_index_from_vectors(folder, corpus, out, model, progress=sys.stderr.isatty(), **building)
    _print_built(report, f"indexed {report.added:,} vectors from {folder} ({report.device})")


def _reindex_lexical(out: Path, corpus: Path | None, writes: bool, wait: bool) -> None:
    from embedkit.errors import InputError
    from embedkit.index import rebuild_lexical

    if corpus is not None or writes:
        raise InputError(
            "--reindex-lexical rebuilds the index in --out from its own documents: give no "
            "corpus, --from-vectors, --append or --overwrite"
        )
    check_io(indexes=[out], wait=wait)
    report = rebuild_lexical(out, progress=sys.stderr.isatty())
    _print_built(report, f"built the lexical side of {report.count:,} documents")


def _print_built(report: IndexReport, what: str) -> None:
    """`WHAT in S s: PATH now holds N`, the index kind with its parameters and why it was chosen, and
    the truncation note (never for --from-vectors: nothing is embedded)."""
    from embedkit.console import make_console

    console = make_console()
    params = ", ".join(f"{k}={v}" for k, v in report.params.items())
    # the calibration's share of the build's seconds, beside them: what choosing the fusion cost
    share = f", of which fusion calibration {report.calibrated.seconds:.1f} s" if report.calibrated else ""
    if not report.written:  # a sync that found nothing to change
        console.print(
            f"{what} in {report.seconds:.1f} s: nothing changed, no new version written; "
            f"{report.path} holds {report.count:,}"
        )
        return
    console.print(f"{what} in {report.seconds:.1f} s{share}: {report.path} now holds {report.count:,}")
    console.print(f"kind {report.kind}{f' ({params})' if params else ''}: {report.reason}")
    if report.calibrated is not None:
        console.print(report.calibrated.describe(), markup=False)
    if report.prefixes != "no prefixes":
        console.print(report.prefixes)
    if report.passages:
        note = ": choose a shorter --passages N"
        print_truncated(
            console, report.truncated, "passage", note, report.truncated_ids, report.truncated_documents
        )
    else:
        hint = f": `--passages {report.passage_advice}` indexes the rest" if report.passage_advice else ""
        print_truncated(
            console, report.truncated, "document", hint, report.truncated_ids, report.truncated_documents
        )
