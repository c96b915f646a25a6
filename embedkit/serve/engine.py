"""The engine: each served model (`embedkit.serve.served_model`) with its dynamic batcher, the
index and the re-ranker, without HTTP.

Threads: the model runs in the batcher's worker threads; the index lives on one thread of its
own, which opens it and runs every search (SQLite connections stay on the thread that opened
them) through the search pipeline, which embeds a request's queries in one call of the served
encoder, as `embedkit search` does, so that both rank alike to the last bit.

Each request's texts are tokenized once, by the encoder's prepare stage (`embedkit.encode.stages`):
the token counts size the batches and bound the queue, and the same ids are padded and run by the
encoder's stages, not tokenized again; `/search` counts its queries' tokens from the batches that
embed them (`stages.counting`), so they too are tokenized once. How large
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

from embedkit.errors import InputError
from embedkit.serve.dynamic_batcher import DynamicBatcher
from embedkit.serve.metrics import Metrics
from embedkit.serve.served_model import ServedModel, resident_bytes, weights_bytes
from embedkit.serve.settings import ServeConfig
from embedkit.serve.sizing import INLINE_TOKENIZE_CHARS, Sizing

if TYPE_CHECKING:
    from embedkit import SearchIndex
    from embedkit.encode.cross_encoder import CrossEncoderModel
    from embedkit.encode.onnx_backend import Warmup
    from embedkit.search.hits import Hit
    from embedkit.search.request import SearchRequest

log = logging.getLogger("embedkit.serve")


@dataclass(frozen=True)
class Answer:
    """What a search answered: each query's hits, from which version, how."""

    hits: list[list[Hit]]  # per query, best first
    truncated: int  # queries cut at the model's max length
    request: SearchRequest  # what was run: the mode, fusion and weight asked for, else the index's
    index_version: str | None  # the version folder answered from (None: an unversioned index)


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # float32 [n, dim], in the texts' order
    tokens: int  # tokens embedded (after truncation)
    truncated: int  # texts cut at the model's max length


class Engine:
    """Loads the model in the background, batches embeddings and runs searches."""

    def __init__(self, config: ServeConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.model: ServedModel | None = None
        self.sizing: Sizing | None = None  # resolved for the device once the model is loaded
        self.warmup: Warmup | None = None  # the encoder's record, when the fixed shapes were run at load
        self.batcher: DynamicBatcher | None = None
        self.ready = False
        self.memory_bytes: int | None = None  # the model's resident memory (`resident_bytes`), once loaded
        self.error: BaseException | None = None
        self.on_ready: Callable[[ServedModel], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self.reranker: CrossEncoderModel | None = None  # the cross-encoder of `config.rerank`, once loaded
        # the engines of `config.extra_models`, by served name once loaded: a batcher each
        self.others: dict[str, Engine] = {}
        self._index_thread = ThreadPoolExecutor(1, thread_name_prefix="embedkit-index")
        # the cross-encoder runs one request's pairs at a time, beside the embedding batches
        self._rerank_thread = ThreadPoolExecutor(1, thread_name_prefix="embedkit-rerank")
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
            before = resident_bytes()
            model = self.model = await loop.run_in_executor(self._index_thread, ServedModel.load, self.config)
            self._grew(before)
            if self.config.rerank is not None:
                self.reranker = await loop.run_in_executor(self._rerank_thread, self._load_reranker)
            await self._start_others(model.name)
            before = resident_bytes()  # the others' memory is theirs: this model's warm-up from here
            sizing = self.sizing = Sizing.resolve(self.config, model.device, model.max_seq_length)
            model.max_rows = sizing.max_rows
            model.grouped = sizing.length_groups
            if sizing.warmup:
                # the shapes this server's batches take: up to max_rows rows, twice the budget
                self.warmup = await loop.run_in_executor(
                    self._index_thread, model.warm_up, sizing.max_rows, 2 * sizing.max_batch_tokens
                )
            ahead = sizing.prepares_ahead
            self.batcher = DynamicBatcher(
                model.run_prepared if ahead else model.run_batch,
                prepare=model.prepare if ahead else None,
                in_flight=sizing.batches_in_flight,
                max_batch_tokens=sizing.max_batch_tokens,
                max_wait_ms=self.config.max_wait_ms,
                wait_when_idle=sizing.wait_when_idle,
                workers=sizing.workers,
                max_queue_texts=self.config.max_queue_texts,
                max_queue_tokens=sizing.max_queue_tokens,
                on_batch=self.metrics.observe_batch,
            )
            await self.batcher.start()
            warm = self.model.tokenize(["warm-up"])
            await self.batcher.embed(warm.rows, warm.lengths)
            self._grew(before)
            self.metrics.memory = {  # /metrics: each served model's memory, by name
                n: e.memory_bytes
                for n in self.served_names()
                if (e := self.engine_for(n)).memory_bytes is not None
            }
            self.ready = True
        except Exception as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error(exc)
            return
        if self.on_ready is not None:
            self.on_ready(self.model)

    def _grew(self, before: int | None) -> None:
        """Add the process's resident growth since `before` to this model's memory (`resident_bytes`)."""
        after = resident_bytes()
        if before is not None and after is not None:
            self.memory_bytes = (self.memory_bytes or 0) + max(0, after - before)

    async def _start_others(self, name: str) -> None:
        """Start an engine for each extra model and each extra index with its model (one after
        another: each load takes the cores); the first failure, or two models of one name, is
        this engine's error."""
        names = [name]
        extra = [self.config.for_extra_model(folder) for folder in self.config.extra_models]
        extra += [self.config.for_extra_model(None, index) for index in self.config.extra_indexes]
        for config in extra:
            folder = config.index or config.model
            other = Engine(config, Metrics())
            await other.start()
            if other.error is not None:
                raise other.error
            assert other.model is not None
            if other.model.name in names:
                await other.close()
                raise InputError(
                    f"two served models are named {other.model.name!r} ({folder} and another): "
                    "each needs its own name in the OpenAI `model` field"
                )
            names.append(other.model.name)
            other.reranker = self.reranker  # one cross-encoder re-ranks every index's hits
            self.others[other.model.name] = other
        if self.others:  # /metrics shows each model's batches and texts under its name
            self.metrics.models = {name: self.metrics} | {n: e.metrics for n, e in self.others.items()}

    def engine_for(self, name: str | None) -> Engine:
        """The engine serving the model `name` (None, or this model's name: this one); an
        `InputError` listing the served names for another."""
        if name is None or not self.others or (self.model is not None and name == self.model.name):
            return self  # one model served: any name is it, as before several could be served
        if name in self.others:
            return self.others[name]
        served = ", ".join(repr(n) for n in self.served_names())
        raise InputError(f"model {name!r} is not served here; the models are {served}")

    def served_names(self) -> list[str]:
        return ([self.model.name] if self.model is not None else []) + list(self.others)

    async def close(self) -> None:
        """Finish queued batches, close the index, stop the threads."""
        for other in self.others.values():
            await other.close()
        if self.batcher is not None:
            await self.batcher.close()
        if self.model is not None and self.model.index is not None:
            await asyncio.get_running_loop().run_in_executor(self._index_thread, self.model.index.close)
        self._index_thread.shutdown(wait=False)
        self._rerank_thread.shutdown(wait=False)

    def _load_reranker(self) -> CrossEncoderModel:
        from embedkit.encode.cross_encoder import CrossEncoderModel

        return CrossEncoderModel(str(self.config.rerank), device=self.config.runtime.device)

    async def rerank(self, query: str, texts: list[str], raw: bool = False) -> np.ndarray:
        """The cross-encoder's score of each text against `query`, in the texts' order."""
        assert self.reranker is not None, "rerank without a cross-encoder"
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._rerank_thread, self.reranker.score, query, texts, raw)

    async def embed(self, texts: Sequence[str]) -> Embedded:
        """The texts' vectors through the batcher, with their token counts."""
        assert self.model is not None and self.batcher is not None, "embed before the model is ready"
        texts = list(texts)
        tokenized = await self.off_loop(self.model.tokenize, texts)
        vectors = await self.batcher.embed(tokenized.rows, tokenized.lengths)
        tokens = sum(tokenized.lengths)
        self.metrics.count_texts(len(texts), tokens, tokenized.truncated)
        return Embedded(vectors, tokens, tokenized.truncated)

    async def off_loop(self, tokenize: Callable[[list[str]], Any], texts: list[str]) -> Any:
        """`tokenize(texts)`, in a thread unless the request is small enough for the event loop on
        this device (`Sizing.inline_tokenize_chars`)."""
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

    def models_info(self) -> list[dict[str, Any]]:
        """Each served model as `/info` reports it under "embedkit": what runs it, the size of the
        weight files it runs from, the memory its loading and first batch took (`resident_bytes`),
        its batches' times."""
        found = []
        for name in self.served_names():
            engine = self.engine_for(name)
            model, batches = engine.model, engine.metrics.batch_seconds
            assert model is not None
            found.append(
                {
                    "name": name,
                    "backend": model.backend,
                    "device": model.device,
                    "precision": model.precision,
                    "dim": model.dim,
                    "weights_bytes": weights_bytes(model.encoder.path, model.backend, model.precision),
                    "memory_bytes": engine.memory_bytes,
                    "batches": batches.count,
                    "mean_batch_seconds": round(batches.sum / batches.count, 6) if batches.count else None,
                }
            )
        return found

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

    async def search(
        self, queries: list[str], k: int, rerank_depth: int | None = None, **settings: Any
    ) -> Answer:
        """Each query's hits from the live version of the index, through the search pipeline
        (`embedkit.search.pipeline`), as `embedkit search` runs it.

        `settings` (mode, fusion, alpha, where, snippets, passages; None: the index's default) make
        the `SearchRequest`; a bad value, or lexical and hybrid on an index without a lexical side,
        is an `InputError`. `rerank_depth` re-ranks each query's first hits with the served
        cross-encoder (`embedkit.search.rerank`), as `embedkit search --rerank` does. The queries
        are embedded by the served encoder itself, as one call, not in the dynamic batcher's length
        groups: padded as `embedkit search` pads them, their vectors and so the scores are the
        command's to the last bit.
        """
        assert self.model is not None and self.model.index is not None
        model = self.model

        def run() -> Answer:
            from embedkit.encode.stages import counting
            from embedkit.index.folder import fit_encoder
            from embedkit.search import pipeline

            index = self._live_index()
            request = index.request(k, **settings)
            if rerank_depth is not None:
                request = self._reranking(request, rerank_depth)
            # an index of fewer dimensions than the model's (`index --dim`) gets its prefix
            encoder = fit_encoder(index.meta, model.encoder) if request.mode != "lexical" else None
            with counting() as tally:  # the queries' tokens, from the batches that embed them
                hits = pipeline.search(index.store, queries, encoder, request, index.prefixes)
            if request.mode != "lexical":
                self.metrics.count_texts(len(queries), tally.tokens, tally.truncated)
            return Answer(hits, tally.truncated, request, index.version)

        return await asyncio.get_running_loop().run_in_executor(self._index_thread, run)

    def _reranking(self, request: SearchRequest, depth: int) -> SearchRequest:
        """`request` with the served cross-encoder as its last stage, over `depth` hits a query."""
        from embedkit.search.rerank import Rerank

        if self.reranker is None:
            raise InputError("this server has no re-ranker: start it with `embedkit serve --rerank MODEL`")
        return Rerank(self.reranker, depth, request.k).request(request)

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
