"""Typer options that several commands share, declared once: model, device, precision, batch size,
the corpus argument and its columns, and `--json`; and the one `Runtime` a command builds from them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from embedkit.search.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS

if TYPE_CHECKING:
    from embedkit.encode.runtime import Runtime
    from embedkit.index.search import SearchIndex

CorpusArgument = Annotated[
    Path,
    typer.Argument(
        help="Corpus: .txt (one document a line), .jsonl, .csv, .tsv (each may be .gz), or a BEIR folder."
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help="Model folder (torch or ONNX export); default: bundled all-MiniLM-L6-v2."
    ),
]
ColumnOption = Annotated[
    str | None, typer.Option("--column", help="Text field of a csv/tsv/jsonl corpus (default: text).")
]
IdColumnOption = Annotated[
    str | None, typer.Option("--id-column", help="Id field (default: _id or id, else the line number).")
]
DeviceOption = Annotated[
    str, typer.Option("--device", help="auto, cpu, cuda or cuda:N (cuda without a GPU is an error).")
]
GpuOption = Annotated[
    bool,
    typer.Option("--gpu", help="Deprecated: the same as --device cuda (the model and faiss on GPU 0)."),
]
PrecisionOption = Annotated[
    str | None,
    typer.Option("--precision", help="ONNX precision: fp32, fp16 or int8 (default: the export's)."),
]
BatchOption = Annotated[int, typer.Option("--batch-size", min=1, help="Texts per forward pass.")]
ChunkOption = Annotated[int, typer.Option("--chunk-size", min=1, help="Documents held in memory at a time.")]
WaitOption = Annotated[
    bool,
    typer.Option("--wait", help="If another run is writing the same output, wait for it instead of failing."),
]
JsonOption = Annotated[Path | None, typer.Option("--json", help="Also write the results to this JSON file.")]
FusionOption = Annotated[
    str | None,
    typer.Option(
        "--fusion",
        help=f"Hybrid fusion: {', '.join(FUSION_METHODS)} (default: the index's calibrated choice, "
        f"`embedkit calibrate`; without one {DEFAULT_FUSION}: dense search again with the query moved "
        "toward the top z-score hits; zscore: standardised scores weighted by --alpha; rrf: "
        "reciprocal rank).",
        show_default=False,
    ),
]
AlphaOption = Annotated[
    float | None,
    typer.Option(
        "--alpha",
        min=0.0,
        max=1.0,
        help="Dense weight of zscore/minmax and of prf's first ranking (default: the calibrated "
        f"choice's, or {DEFAULT_ALPHA} with --fusion).",
        show_default=False,
    ),
]
CollectionOption = Annotated[
    str | None,
    typer.Option("--collection", "-c", help="Collection of a milvus:// or .db target (default: embedkit)."),
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", help="Milvus token (USER:PASSWORD or an API key); default: $MILVUS_TOKEN."),
]


def runtime_from_options(
    device: str = "auto", precision: str | None = None, *, gpu: bool = False, **more: Any
) -> Runtime:
    """The command's one `Runtime` (`embedkit.encode.runtime`), checked before any work; `more`: its
    other fields (threads, warmup, ...). `--gpu` is `--device cuda`, with a deprecation line on
    stderr; with `--device cpu` it is an `InputError` (one line, exit 2)."""
    from embedkit.encode.runtime import GPU_DEPRECATION, Runtime, fold_gpu

    device = fold_gpu(device, gpu)  # the conflict first: an error line alone, no warning before it
    if gpu:
        typer.echo(f"warning: {GPU_DEPRECATION}", err=True)
    return Runtime(device=device, precision=precision, **more)


def open_search_index(
    location: str | Path, collection: str | None, token: str | None, runtime: Runtime | None = None
) -> SearchIndex:
    """An index folder, or a collection `embedkit push` filled, opened for search (`runtime`'s
    device cuda: faiss on the GPU for an index folder)."""
    from embedkit.remote.search import open_search_index as open_index

    return open_index(location, collection, token, runtime=runtime)
