"""The settings of an index build (`IndexOptions`, what `embedkit index` passes to `build_index`)
and the checks of them that need no model and no corpus read.

Apart from `embedkit.jobs.index_build`, which does the work, because the settings are what every
caller builds: the CLI, `Collection`, a re-embed (`embedkit.jobs.index_reembed`) and the tests
create an `IndexOptions` without needing the steps that embed. `check_options` runs first, before
anything is opened; `check_vector_options` once the appended index's metadata is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError
from embedkit.index.kinds import KINDS
from embedkit.index.passages import PassageSettings
from embedkit.index.quantized import QUANTIZE_ON_CPU, check_quantize, quantization
from embedkit.jobs.streaming import CorpusOptions


@dataclass(frozen=True)
class IndexOptions:
    """How `build_index` builds or extends an index; the defaults are `embedkit index`'s."""

    kind: str = "auto"  # auto, flat, hnsw or ivf-pq (`embedkit.index.kinds`)
    # keep the first `dim` dimensions of each vector, renormalized (`embedkit.encode.dimensions`);
    # None: the model's own (an append keeps the index's)
    dim: int | None = None
    # int8 or binary: FAISS searches compact codes, the best candidates rescored with the float
    # vectors kept on disk (`embedkit.index.quantized`); None: float vectors (an append keeps the index's)
    quantize: str | None = None
    append: bool = False  # add to the index in `out`
    upsert: bool = False  # with `append`: documents whose ids the index holds replace them
    overwrite: bool = False  # replace the index in `out`
    # keep the index in `out` in step with the corpus: unchanged documents kept, changed and new
    # ones embedded, those gone deleted (`embedkit.jobs.index_changes`); no index there: a new one
    sync: bool = False
    lexical: bool = True  # a new index also gets a BM25 index of title + text (hybrid search)
    calibrate: bool = True  # choose the fusion on pseudo queries (`embedkit.evaluation.fusion_calibration`)
    passages: PassageSettings | str | None = None  # split documents into passages (a new index)
    query_prefix: str | None = None  # None: the model card's (a new index) or the index's (append)
    passage_prefix: str | None = None
    # where the model runs (`embedkit.encode.runtime`, its defaults); device cuda or cuda:N also
    # builds with faiss on that GPU (saved in CPU form)
    runtime: Runtime = field(default_factory=Runtime)
    corpus: CorpusOptions = field(default_factory=CorpusOptions)  # columns, chunk and batch sizes
    # the older spelling of `runtime` (gpu=True, deprecated: device cuda), folded into it on creation
    device: str | None = None
    precision: str | None = None
    gpu: bool = False

    def __post_init__(self) -> None:
        if self.device is None and self.precision is None and not self.gpu:
            return
        given = None if self.runtime == Runtime() else self.runtime
        runtime = runtime_of(given, self.gpu, device=self.device, precision=self.precision)
        for name, value in (("runtime", runtime), ("device", None), ("precision", None), ("gpu", False)):
            object.__setattr__(self, name, value)  # frozen: set once, here


def check_options(options: IndexOptions) -> None:
    """A known kind, and `upsert` only with `append`."""
    if options.kind not in KINDS:
        raise InputError(f"unknown index kind {options.kind!r}: use {', '.join(KINDS)}")
    if options.upsert and not options.append:
        raise InputError("--upsert replaces documents of an existing index: use it with --append")


def check_vector_options(options: IndexOptions, old: dict[str, Any] | None) -> None:
    """--quantize and --dim: known values for a new index; an append keeps the index's."""
    if options.quantize is not None:
        check_quantize(options.quantize, "flat" if options.kind == "auto" else options.kind, 8)
        if options.runtime.faiss_gpu is not None:
            raise InputError(QUANTIZE_ON_CPU)
    if old is not None and options.quantize not in (None, quantization(old["params"])):
        held = quantization(old["params"]) or "float vectors"
        raise InputError(
            f"--quantize {options.quantize} differs from the index's ({held}); an append keeps it"
        )
    if old is not None and options.dim not in (None, int(old["dim"])):
        raise InputError(
            f"--dim {options.dim} differs from the index's dimension {old['dim']}; an append keeps it"
        )
