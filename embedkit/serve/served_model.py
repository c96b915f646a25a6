"""A served model: its open encoder (and index), how a batch of its texts is cut into runs, and
what the server says about it. `Engine` (`embedkit.serve.engine`) holds one per model and feeds it
through its batcher.

Every step from text to vector is the encoder's own (`embedkit.encode.stages`): the server
tokenizes a request with the encoder's prepare stage, pads a batch with it, runs the encoder's
run stage and places the vectors with its finish stage, as `encode` does, so both give the same
arrays at every stage. What is the server's own is the grouping: on a CPU a batch is cut into
groups of similar length (`length_groups`); on CUDA a batch is one bucket of the fixed shapes
(longest first, as `encode` sorts), at most `max_rows` rows a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.protocol import StagedEncoder
from embedkit.encode.stages import EncoderStages
from embedkit.encode.token_arrays import Batch, Tokens
from embedkit.serve.settings import ServeConfig
from embedkit.serve.sizing import MAX_ROWS

if TYPE_CHECKING:
    from embedkit import SearchIndex


# Padding allowed in one length group, as a fraction of its real tokens. `benchmarks/serve.py
# --grouping` (all-MiniLM-L6-v2, ONNX, 2 shared CPU cores): random batches of 32 Wikipedia
# sentences ran at 18 sentences/s as one padded call, 35 / 33-35 / 30-31 in groups padded at most
# 10% / 25% / 50%, and 36 as length-sorted batches of 64; 25% needs about 5 calls per 32 texts.
MAX_PADDING = 0.25


def length_groups(tokens: Sequence[int], max_padding: float = MAX_PADDING) -> list[list[int]]:
    """Positions of `tokens` sorted by length, cut into groups whose padding to their longest text
    is at most `max_padding` of their real tokens (a text alone is always a group)."""
    groups: list[list[int]] = []
    group: list[int] = []
    total = 0
    for i in sorted(range(len(tokens)), key=tokens.__getitem__):
        n = tokens[i]
        if group and (len(group) + 1) * n > (1 + max_padding) * (total + n):
            groups.append(group)
            group, total = [], 0
        group.append(i)
        total += n
    if group:
        groups.append(group)
    return groups


@dataclass(frozen=True)
class Tokenized:
    """A request's texts through the prepare stage: each text's ids, token counts, truncations."""

    rows: list[np.ndarray]  # each text's token ids (int32), the items the batcher queues
    lengths: list[int]
    truncated: int


@dataclass(frozen=True)
class Prepared:
    """A batch padded for the model: its padded arrays, a `Batch` per model run (its `indices`
    are the texts' places in the batch)."""

    size: int  # texts in the batch
    runs: list[Batch]


class ServedModel:
    """An open encoder (and index), with what the server says about it."""

    def __init__(
        self, encoder: StagedEncoder, index: SearchIndex | None = None, name: str | None = None
    ) -> None:
        from embedkit.encode.model_name import model_name

        self.encoder = encoder
        self.index = index
        self.stages: EncoderStages = encoder.stages
        self.name = model_name(encoder.path, name)  # the card's name, not a cache key or "onnx"
        self.backend = str(encoder.backend)
        self.device = str(encoder.device)
        self.precision = str(encoder.precision)
        self.pooling = str(encoder.pooling)
        self.normalize_default = bool(encoder.normalize_default)  # the model L2-normalises its vectors
        self.dim = int(encoder.dim)
        self.max_seq_length = int(encoder.max_seq_length)
        self.shapes = self.stages.shapes  # an ONNX encoder's ShapePlan; torch: None
        self.max_rows = MAX_ROWS  # rows in one model run under fixed shapes
        self.grouped = True  # cut batches into length groups (a CPU's); False: one bucket (CUDA's)

    @staticmethod
    def check(config: ServeConfig) -> None:
        """Read the model's (and the index's) folder, not the weights: quick, so that a wrong path is
        one error line before the server says its URL, not after."""
        from embedkit.encode.model_folder import read_model_spec
        from embedkit.index.folder import check_model_for, read_index_meta
        from embedkit.remote.base import is_remote

        if config.rerank is not None:
            from embedkit.encode.cross_encoder import read_cross_encoder

            read_cross_encoder(config.rerank)
        for folder in config.extra_models:
            read_model_spec(folder)
        for index in config.extra_indexes:
            check_model_for(read_index_meta(index), None, config.runtime.precision)
        if config.index is None:
            read_model_spec(config.model)
        elif not is_remote(config.index):  # a collection is checked when it is opened, at load
            check_model_for(read_index_meta(config.index), config.model, config.runtime.precision)

    @classmethod
    def load(cls, config: ServeConfig) -> ServedModel:
        """Open the model (with `config.index`: the index and its model, or `config.model` checked
        against it). Blocking: minutes for a large model, so the server runs it in a thread."""
        from embedkit import load_encoder
        from embedkit.index.folder import check_model_for
        from embedkit.remote.search import open_search_index

        # By default ONNX Runtime's CPU threads busy-wait for the next run after each one. An
        # offline `encode` of large batches loses little by it, but a server runs many small
        # length groups and shares the cores with its event loop: `benchmarks/serve.py` on 2
        # shared CPU cores served 40 instead of 25 sentences/s to 8 single-sentence clients
        # without spinning, 36 instead of 23 to 32 (benchmarks/README.md; `--ort-spinning` keeps it):
        # `SERVER_RUNTIME`'s spinning off. The engine warms the server's own shapes once it knows its sizing.
        runtime = replace(config.runtime, warmup=False)
        if config.index is None:
            return cls(load_encoder(config.model, runtime=runtime), name=config.served_model_name)
        index = open_search_index(config.index, config.collection, config.token)
        try:
            spec = check_model_for(index.meta, config.model, config.runtime.precision)
            return cls(load_encoder(spec, runtime=runtime), index, name=config.served_model_name)
        except BaseException:
            index.close()
            raise

    def tokenize(self, texts: Sequence[str]) -> Tokenized:
        """The texts through the encoder's prepare stage (truncated at the model's length)."""
        tokens = self.stages.tokenize(list(texts))
        rows = [tokens.row(i) for i in range(len(tokens))]
        return Tokenized(rows, tokens.lengths.tolist(), int(tokens.truncated.sum()))

    def prepare(self, items: list[np.ndarray], tokens: list[int]) -> Prepared:
        """One batch of tokenized texts padded for the model: on a CPU a run per group of similar
        length; on CUDA one bucket, longest first, at most `max_rows` rows a run."""
        table = Tokens.from_rows(items)
        if self.grouped:
            groups = [np.asarray(group) for group in length_groups(tokens)]
        else:
            groups = [np.argsort(-table.lengths, kind="stable")]
        step = self.max_rows if self.stages.fixed_shapes is not None else len(items)
        runs = [
            self.stages.pad(table, group[first : first + step], self.max_rows)
            for group in groups
            for first in range(0, len(group), step)
        ]
        return Prepared(len(items), runs)

    def run_prepared(self, prepared: Prepared, tokens: list[int] | None = None) -> np.ndarray:
        """The vectors of a prepared batch, as `encoder.encode` computes them (the model's own
        normalization), in the batch's order: the run and finish stages."""
        ran = ((batch.indices, self.stages.run(batch)) for batch in prepared.runs)
        return self.stages.finish(ran, prepared.size)

    def run_batch(self, items: list[np.ndarray], tokens: list[int]) -> np.ndarray:
        """One batch of tokenized texts through the model: `prepare`, then `run_prepared`."""
        return self.run_prepared(self.prepare(items, tokens))

    def warm_up(self, rows: int, max_tokens: int) -> Any:
        """The encoder's warm-up of the fixed shapes this server's batches take, or None."""
        return self.stages.warm_up(rows, max_tokens)

    @property
    def index_version(self) -> str | None:
        return self.index.version if self.index is not None else None

    def describe(self) -> str:
        return f"{self.name} ({self.backend}, {self.device}, {self.precision}, {self.dim}-d)"


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux's /proc/self/statm), None where it cannot be read.

    A served model's memory is the growth of it while the model loads and runs its first batch
    (`Engine.start` measures each model in turn, one loading at a time): the weights, the runtime's
    session and arena. Memory the process frees later, or shares between models, is not split."""
    import os

    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def weights_bytes(folder: Any, backend: str, precision: str) -> int:
    """The size of the weight files a model runs from: its ONNX file of `precision`, else its
    torch weights."""
    from embedkit.encode.precisions import PRECISION_FILES

    folder = Path(folder)
    if backend == "onnx":
        graph = folder / PRECISION_FILES.get(precision, "model.onnx")
        files = [graph, *folder.glob(graph.name + ".data")]  # external data beside a large graph
    else:
        files = [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]
    return sum(f.stat().st_size for f in files if f.is_file())
