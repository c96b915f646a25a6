"""A served model: its open encoder (and index), how its texts are tokenized, grouped by length and
padded for a run, and what the server says about it. `Engine` (`embedkit.serve.engine`) holds one
per model and feeds it through its batcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import Batch, encode_without_offsets, pad_encodings
from embedkit.errors import InputError
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
class Prepared:
    """A batch padded for the model: its texts' positions and padded arrays, per model run."""

    size: int  # texts in the batch
    runs: list[tuple[np.ndarray, Batch]]


class ServedModel:
    """An open encoder (and index), with what the server says about it."""

    def __init__(self, encoder: Any, index: SearchIndex | None = None, name: str | None = None) -> None:
        from embedkit.encode.model_name import model_name

        self.encoder = encoder
        self.index = index
        tokenizer = getattr(getattr(encoder, "batcher", None), "tokenizer", None)
        if tokenizer is None:
            raise InputError(f"{encoder.path} has no tokenizer to count tokens with")
        self.tokenizer = tokenizer
        self.name = model_name(encoder.path, name)  # the card's name, not a cache key or "onnx"
        self.backend = str(encoder.backend)
        self.device = str(encoder.device)
        self.precision = str(getattr(encoder, "precision", "fp32"))
        self.dim = int(encoder.dim)
        self.max_seq_length = int(encoder.max_seq_length)
        self.shapes = getattr(encoder, "shapes", None)  # an ONNX encoder's ShapePlan; torch: None
        self.max_rows = MAX_ROWS  # rows in one model run under fixed shapes

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
            check_model_for(read_index_meta(index), None, config.precision)
        if config.index is None:
            read_model_spec(config.model)
        elif not is_remote(config.index):  # a collection is checked when it is opened, at load
            check_model_for(read_index_meta(config.index), config.model, config.precision)

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
        # without spinning, 36 instead of 23 to 32 (benchmarks/README.md; `--ort-spinning` keeps it).
        options = {
            "device": config.device,
            "precision": config.precision,
            "spinning": config.ort_spinning,
            "warmup": False,  # the engine warms the server's own shapes once it knows its sizing
        }
        if config.index is None:
            return cls(load_encoder(config.model, **options), name=config.served_model_name)
        index = open_search_index(config.index, config.collection, config.token)
        try:
            spec = check_model_for(index.meta, config.model, config.precision)
            return cls(load_encoder(spec, **options), index, name=config.served_model_name)
        except BaseException:
            index.close()
            raise

    def tokenize(self, texts: Sequence[str]) -> tuple[list[Any], list[int], int]:
        """The texts' encodings (truncated at the model's length), their token counts, and how many
        texts were truncated."""
        encodings = encode_without_offsets(self.tokenizer, list(texts))
        return encodings, [len(e.ids) for e in encodings], sum(1 for e in encodings if e.overflowing)

    def prepare(self, encodings: list[Any], tokens: list[int]) -> Prepared:
        """One batch of tokenized texts padded for the model: a run per group of similar length,
        each padded to its fixed shape when the encoder has them (at most `max_rows` rows)."""
        pad_id = self.encoder.batcher.pad_id
        fixed = self.shapes if self.shapes is not None and self.shapes.fixed else None
        runs = []
        for group in length_groups(tokens):
            step = self.max_rows if fixed else len(group)
            for first in range(0, len(group), step):
                rows = np.asarray(group[first : first + step])
                runs.append((rows, pad_encodings(encodings, rows, pad_id, shapes=fixed, max_rows=step)))
        return Prepared(len(encodings), runs)

    def run_prepared(self, prepared: Prepared, tokens: list[int] | None = None) -> np.ndarray:
        """The vectors of a prepared batch, as `encoder.encode` computes them (the model's own
        normalization)."""
        out = np.empty((prepared.size, self.dim), dtype=np.float32)
        for rows, batch in prepared.runs:
            out[rows] = self.encoder.run_batch(batch)[: len(rows)]
        return out

    def run_batch(self, encodings: list[Any], tokens: list[int]) -> np.ndarray:
        """One batch of tokenized texts through the model: `prepare`, then `run_prepared`."""
        return self.run_prepared(self.prepare(encodings, tokens))

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
