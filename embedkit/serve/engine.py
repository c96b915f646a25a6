"""The served model: encoder, optional index, token counts and the dynamic batcher, without HTTP.

Threads: the model runs in the batcher's worker threads; the index lives on one thread of its
own, which opens it and runs every search (SQLite connections stay on the thread that opened
them) through the search pipeline, which embeds a request's queries in one call of the served
encoder, as `embedkit search` does, so that both rank alike to the last bit.

Each request's texts are tokenized once: the token counts size the batches and bound the queue,
and the same encodings are padded and run (`encoder.run_batch`), not tokenized again. How large
the batches are, how many are in flight, where tokenization runs and whether the fixed shapes are
run at load depend on the device (`embedkit.serve.sizing`); `/info` reports what was chosen.

The index follows its folder: before each search the index thread checks which version `CURRENT`
names (one small file read), and when an append or a rebuild has published another one, it opens
that version, swaps it in and closes the old one, so a server never answers from a version that
`embedkit clean` may delete, and two servers on one index agree. A new version built with another
model is not swapped in (the served model could not search it): the server keeps its version
and logs once that it needs a restart. Responses name the version they were answered from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import Batch, pad_encodings
from embedkit.errors import InputError
from embedkit.serve.dynamic_batcher import DynamicBatcher
from embedkit.serve.metrics import Metrics
from embedkit.serve.settings import ServeConfig
from embedkit.serve.sizing import INLINE_TOKENIZE_CHARS, MAX_ROWS, Sizing

if TYPE_CHECKING:
    from embedkit import SearchIndex
    from embedkit.search.request import SearchRequest

log = logging.getLogger("embedkit.serve")


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
class Answer:
    """What a search answered: each query's hits, from which version, how."""

    hits: list[list[Any]]  # per query, `Hit`s best first
    truncated: int  # queries cut at the model's max length
    request: SearchRequest  # what was run: the mode, fusion and weight asked for, else the index's
    index_version: str | None  # the version folder answered from (None: an unversioned index)


@dataclass(frozen=True)
class Prepared:
    """A batch padded for the model: its texts' positions and padded arrays, per model run."""

    size: int  # texts in the batch
    runs: list[tuple[np.ndarray, Batch]]


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # float32 [n, dim], in the texts' order
    tokens: int  # tokens embedded (after truncation)
    truncated: int  # texts cut at the model's max length


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
        encodings = self.tokenizer.encode_batch(list(texts))
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


class Engine:
    """Loads the model in the background, batches embeddings and runs searches."""

    def __init__(self, config: ServeConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.model: ServedModel | None = None
        self.sizing: Sizing | None = None  # resolved for the device once the model is loaded
        self.warmup: Any = None  # the encoder's Warmup record, when the fixed shapes were run at load
        self.batcher: DynamicBatcher | None = None
        self.ready = False
        self.error: BaseException | None = None
        self.on_ready: Callable[[ServedModel], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self._index_thread = ThreadPoolExecutor(1, thread_name_prefix="embedkit-index")
        self._last_warning = ""
        self.metrics.gauge(
            "embedkit_ready", "1 once the model answered its warm-up batch.", lambda: self.ready
        )
        self.metrics.gauge(
            "embedkit_queue_depth",
            "Texts waiting for a batch.",
            lambda: self.batcher.queued if self.batcher else 0,
        )
        self.metrics.gauge(
            "embedkit_texts_running",
            "Texts in batches running now.",
            lambda: self.batcher.running if self.batcher else 0,
        )

    async def start(self) -> None:
        """Load the model, start the batcher, run one warm-up batch; then `ready` is True and
        `on_ready(model)` is called. A failure is kept in `error` and handed to `on_error`."""
        loop = asyncio.get_running_loop()
        try:
            model = self.model = await loop.run_in_executor(self._index_thread, ServedModel.load, self.config)
            sizing = self.sizing = Sizing.resolve(self.config, model.device, model.max_seq_length)
            model.max_rows = sizing.max_rows
            warm_up = getattr(model.encoder, "warm_up", None)
            if sizing.warmup and warm_up is not None and model.shapes is not None and model.shapes.fixed:
                # the shapes this server's batches take: up to max_rows rows, twice the budget
                self.warmup = await loop.run_in_executor(
                    self._index_thread, warm_up, sizing.max_rows, 2 * sizing.max_batch_tokens
                )
            ahead = sizing.prepares_ahead
            self.batcher = DynamicBatcher(
                model.run_prepared if ahead else model.run_batch,
                prepare=model.prepare if ahead else None,
                in_flight=sizing.batches_in_flight,
                max_batch_tokens=sizing.max_batch_tokens,
                max_wait_ms=self.config.max_wait_ms,
                workers=sizing.workers,
                max_queue_texts=self.config.max_queue_texts,
                max_queue_tokens=sizing.max_queue_tokens,
                on_batch=self.metrics.observe_batch,
            )
            await self.batcher.start()
            encodings, lengths, _ = self.model.tokenize(["warm-up"])
            await self.batcher.embed(encodings, lengths)
            self.ready = True
        except Exception as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error(exc)
            return
        if self.on_ready is not None:
            self.on_ready(self.model)

    async def close(self) -> None:
        """Finish queued batches, close the index, stop the threads."""
        if self.batcher is not None:
            await self.batcher.close()
        if self.model is not None and self.model.index is not None:
            await asyncio.get_running_loop().run_in_executor(self._index_thread, self.model.index.close)
        self._index_thread.shutdown(wait=False)

    async def embed(self, texts: Sequence[str]) -> Embedded:
        """The texts' vectors through the batcher, with their token counts."""
        assert self.model is not None and self.batcher is not None, "embed before the model is ready"
        texts = list(texts)
        encodings, lengths, truncated = await self.off_loop(self.model.tokenize, texts)
        vectors = await self.batcher.embed(encodings, lengths)
        self.metrics.count_texts(len(texts), sum(lengths), truncated)
        return Embedded(vectors, sum(lengths), truncated)

    async def off_loop(self, tokenize: Callable[[list[str]], Any], texts: list[str]) -> Any:
        """`tokenize(texts)`, in a thread unless the request is small enough for the event loop on
        this device (`Sizing.inline_tokenize_chars`: none on CUDA)."""
        inline = self.sizing.inline_tokenize_chars if self.sizing else INLINE_TOKENIZE_CHARS["cpu"]
        if sum(map(len, texts)) > inline:
            return await asyncio.to_thread(tokenize, texts)
        return tokenize(texts)

    def runtime_info(self) -> dict[str, Any]:
        """What the server runs with, as `/info` reports it under "embedkit"."""
        assert self.model is not None and self.sizing is not None
        sizing, shapes = self.sizing, self.model.shapes
        warmup = self.warmup
        return {
            "device": self.model.device,
            "backend": self.model.backend,
            "precision": self.model.precision,
            "max_batch_tokens": sizing.max_batch_tokens,
            "max_wait_ms": self.config.max_wait_ms,
            "inference_workers": sizing.workers,
            "batches_in_flight": sizing.batches_in_flight,
            "prepares_ahead": sizing.prepares_ahead,
            "tokenization": "thread"
            if sizing.inline_tokenize_chars == 0
            else (f"event loop up to {sizing.inline_tokenize_chars} characters a request, else a thread"),
            "max_queue_tokens": sizing.max_queue_tokens,
            "shapes": shapes.describe(sizing.max_rows) if shapes is not None else {"fixed": False},
            "warmup": {
                "enabled": sizing.warmup,
                "shapes": warmup.shapes if warmup else 0,
                "seconds": round(warmup.seconds, 3) if warmup else 0.0,
            },
        }

    def describe_sizing(self) -> str:
        """One line for the console once the model is ready."""
        info = self.runtime_info()
        shapes = "fixed shapes" if info["shapes"]["fixed"] else "exact shapes"
        warm = info["warmup"]
        warmed = f", {warm['shapes']} shapes warmed in {warm['seconds']:.1f} s" if warm["shapes"] else ""
        return (
            f"  batches of <= {info['max_batch_tokens']} tokens, <= {info['max_wait_ms']:g} ms wait, "
            f"{info['inference_workers']} inference thread(s), {info['batches_in_flight']} batch(es) "
            f"in flight, {shapes}{warmed}"
        )

    async def search(self, queries: list[str], k: int, **settings: Any) -> Answer:
        """Each query's hits from the live version of the index, through the search pipeline
        (`embedkit.search.pipeline`), as `embedkit search` runs it.

        `settings` (mode, fusion, alpha, where, snippets, passages; None: the index's default) make
        the `SearchRequest`; a bad value, or lexical and hybrid on an index without a lexical side,
        is an `InputError`. The queries are embedded by the served encoder itself, as one call, not
        in the dynamic batcher's length groups: padded as `embedkit search` pads them, their
        vectors and so the scores are the command's to the last bit.
        """
        assert self.model is not None and self.model.index is not None
        model = self.model

        def run() -> Answer:
            from embedkit.index.folder import fit_encoder
            from embedkit.search import pipeline

            index = self._live_index()
            request = index.request(k, **settings)
            truncated = 0
            if request.mode != "lexical":
                _, lengths, truncated = model.tokenize(index.prefixes.queries(queries))
                self.metrics.count_texts(len(queries), sum(lengths), truncated)
            # an index of fewer dimensions than the model's (`index --dim`) gets its prefix
            encoder = fit_encoder(index.meta, model.encoder) if request.mode != "lexical" else None
            hits = pipeline.search(index.store, queries, encoder, request, index.prefixes)
            return Answer(hits, truncated, request, index.version)

        return await asyncio.get_running_loop().run_in_executor(self._index_thread, run)

    def _live_index(self) -> SearchIndex:
        """On the index thread: the served index, moved to the version `CURRENT` names when an
        append or a rebuild has published another one (the old one closed)."""
        assert self.model is not None and self.model.index is not None
        from embedkit import SearchIndex

        served = self.model.index
        try:
            if served.is_current():
                return served
            fresh = SearchIndex.load(served.path)
        except InputError as exc:  # the folder is being replaced or is damaged: keep what works
            self._warn_once(
                f"index {served.path}: {str(exc).splitlines()[0]}; answering from {served.version}"
            )
            return served
        try:
            fresh.check_encoder(self.model.encoder)
        except InputError:
            fresh.close()
            self._warn_once(
                f"index {served.path}: version {fresh.version} was built with another model; answering "
                f"from {served.version} until the server is restarted"
            )
            return served
        self.model.index = fresh
        served.close()
        self.metrics.count_index_swap()
        log.info("index %s: now answering from %s (was %s)", served.path, fresh.version, served.version)
        return fresh

    def _warn_once(self, message: str) -> None:
        if message != self._last_warning:
            self._last_warning = message
            log.warning("%s", message)
