"""`embedkit embed`: embed a corpus of any size to a .npy file, streaming, with its ids beside it;
or one shard of it (`--shard I/N`), or all of it on a Ray cluster (`--ray`), into part files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedkit.cli.common import check_io, handle_errors, print_truncated
from embedkit.cli.options import (
    BatchOption,
    ChunkOption,
    ColumnOption,
    CorpusArgument,
    DeviceOption,
    IdColumnOption,
    ModelOption,
    PrecisionOption,
    WaitOption,
    runtime_from_options,
)

if TYPE_CHECKING:
    from embedkit.jobs.run_report import EmbedRun


def register(app: typer.Typer) -> None:
    app.command("embed")(embed)


@handle_errors
def embed(
    corpus: CorpusArgument,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output .npy (float32 [n, dim]); ids go to FILE.ids.txt. With --shard or --ray: a folder "
            "that receives part-I-of-N.npy, .ids.txt and .json.",
        ),
    ],
    model: ModelOption = None,
    column: ColumnOption = None,
    id_column: IdColumnOption = None,
    normalize: Annotated[
        bool | None,
        typer.Option(
            "--normalize/--no-normalize", help="L2-normalize the vectors (default: as the model does)."
        ),
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    batch_size: BatchOption = 64,
    chunk_size: ChunkOption = 10_000,
    wait: WaitOption = False,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            metavar="I/N",
            help="Embed only shard I of N (0-based: 0/4 .. 3/4), documents [I*n/N, (I+1)*n/N), "
            "into DIR/part-I-of-N.*; `index --from-vectors DIR` builds the index from all N.",
        ),
    ] = None,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray", help="Embed on a Ray cluster, one part per worker (needs the `distributed` extra)."
        ),
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", help="Ray cluster to join, e.g. auto (default: RAY_ADDRESS, else a local one)."
        ),
    ] = None,
    num_workers: Annotated[
        int | None,
        typer.Option(
            "--num-workers", min=1, help="Ray workers = parts (default: one per GPU, else per CPU)."
        ),
    ] = None,
    cpus_per_worker: Annotated[
        int, typer.Option("--cpus-per-worker", min=1, help="CPUs (and ONNX Runtime threads) per Ray worker.")
    ] = 1,
) -> None:
    """Embed every document of CORPUS into a .npy file, in chunks, in bounded memory.

    Row i of the .npy is the corpus's i-th document; line i of FILE.ids.txt is its id. Both files
    are written atomically: an interrupted run leaves any previous output intact. With --shard or
    --ray, --out is a folder of part files which, concatenated in order, are that same output.
    """
    from embedkit.jobs.streaming import CorpusOptions, embed_to_file, ids_path_for

    runtime = runtime_from_options(device, precision)  # before any output folder or lock file is made
    options = CorpusOptions(column=column, id_column=id_column, chunk_size=chunk_size, batch_size=batch_size)
    # the same for all three ways to embed: one file, one shard, or all shards on Ray
    encoding = {
        "options": options,
        "normalize": normalize,
        "runtime": runtime,
        "progress": sys.stderr.isatty(),
    }
    if shard is not None or ray or ray_address is not None or num_workers is not None:
        _embed_parts(
            corpus, out, model, encoding, wait, shard, ray, ray_address, num_workers, cpus_per_worker
        )
        return
    ids = ids_path_for(out) if out.suffix == ".npy" else None
    check_io(inputs=[corpus, model], files=[out, ids], wait=wait)
    report = embed_to_file(corpus, out, model, **encoding)
    _print_run(
        report,
        f"{report.count:,} documents ({report.dim}-d) on {report.backend}/{report.device}",
        f"{report.out} and {report.ids_path}",
        report.truncated_ids,
        report.truncated_documents,
    )


def _embed_parts(
    corpus: Path,
    out: Path,
    model: str | None,
    encoding: dict[str, Any],
    wait: bool,
    shard: str | None,
    ray: bool,
    ray_address: str | None,
    num_workers: int | None,
    cpus_per_worker: int,
) -> None:
    """`--shard I/N` (one part, here) or `--ray` (all parts, on a Ray cluster) into the folder `out`."""
    from embedkit.errors import InputError
    from embedkit.jobs.parts import Shard, part_paths
    from embedkit.jobs.sharding import check_part_folder

    if shard is not None and ray:
        raise InputError("--shard and --ray exclude each other: Ray splits the corpus itself")
    if not ray and (ray_address is not None or num_workers is not None):
        raise InputError("--ray-address and --num-workers need --ray")
    check_part_folder(out)
    if shard is not None:
        from embedkit.jobs.sharding import embed_shard

        chosen = Shard.parse(shard)
        check_io(inputs=[corpus, model], files=part_paths(out, chosen), wait=wait)
        report = embed_shard(corpus, out, chosen, model, **encoding)
        _print_run(
            report,
            f"{report.shard.name}: {report.count:,} of {report.total:,} documents "
            f"(from {report.start:,}, {report.dim}-d) on {report.backend}/{report.device}",
            f"{report.out} and its .ids.txt and .json",
        )
        return
    from embedkit.jobs.distributed import embed_with_ray

    check_io(inputs=[corpus, model], folders=[out], wait=wait)
    result = embed_with_ray(
        corpus,
        out,
        model,
        address=ray_address,
        num_workers=num_workers,
        cpus_per_worker=cpus_per_worker,
        **encoding,
    )
    _print_run(
        result,
        f"{result.count:,} documents ({result.dim}-d) with {result.workers} Ray worker(s) on {result.device}",
        f"{result.parts} parts to {result.folder}",
    )


def _print_run(
    report: EmbedRun, what: str, wrote: str, names: Sequence[str] = (), documents: int = 0
) -> None:
    """`embedded WHAT in S s (R sent/s)`, the truncation note (naming the first `names` of the
    `documents` cut, where the run says), then `wrote WROTE`."""
    from embedkit.console import make_console

    console = make_console()
    console.print(f"embedded {what} in {report.seconds:.1f} s ({report.per_second:,.0f} sent/s)")
    print_truncated(console, report.truncated, names=names, documents=documents)
    console.print(f"wrote {wrote}")
