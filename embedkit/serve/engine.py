"""The served model: encoder, optional index, token counts and the dynamic batcher, without HTTP.

Threads: the model runs in the batcher's worker threads; the index lives on one thread of its
own, which opens it and runs every search (SQLite connections stay on the thread that opened
them), and whose queries are embedded through the batcher like any other request's texts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.encode.protocol import EncoderBase
from embedkit.errors import InputError
from embedkit.serve.batching import DynamicBatcher, length_groups
from embedkit.serve.metrics import Metrics
from embedkit.serve.settings import ServeConfig

if TYPE_CHECKING:
    from embedkit import SearchIndex

# Requests with more characters than this are tokenized in a thread, not in the event loop
# (about 5 ms of tokenization on one core).
INLINE_TOKENIZE_CHARS = 50_000
SEARCH_MODES = ("dense", "lexical", "hybrid")


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # float32 [n, dim], in the texts' order
    tokens: int  # tokens embedded (after truncation)
    truncated: int  # texts cut at the model's max length


class ServedModel:
    """An open encoder (and index), with what the server says about it."""

    def __init__(self, encoder: Any, index: SearchIndex | None = None) -> None:
        self.encoder = encoder
        self.index = index
        tokenizer = getattr(getattr(encoder, "batcher", None), "tokenizer", None)
        if tokenizer is None:
            raise InputError(f"{encoder.path} has no tokenizer to count tokens with")
        self.tokenizer = tokenizer
        self.name = encoder.path.name
        self.backend = str(encoder.backend)
        self.device = str(encoder.device)
        self.precision = str(getattr(encoder, "precision", "fp32"))
        self.dim = int(encoder.dim)
        self.max_seq_length = int(encoder.max_seq_length)

    @staticmethod
    def check(config: ServeConfig) -> None:
        """Read the model's (and the index's) folder, not the weights: quick, so that a wrong path is
        one error line before the server says its URL, not after."""
        from embedkit.encode.model_folder import read_model_spec
        from embedkit.index.folder import check_model_for, read_index_meta

        if config.index is None:
            read_model_spec(config.model)
        else:
            check_model_for(read_index_meta(config.index), config.model)

    @classmethod
    def load(cls, config: ServeConfig) -> ServedModel:
        """Open the model (with `config.index`: the index and its model, or `config.model` checked
        against it). Blocking: minutes for a large model, so the server runs it in a thread."""
        from embedkit import SearchIndex, load_encoder

        if config.index is None:
            encoder = load_encoder(config.model, device=config.device, precision=config.precision)
            if not config.ort_spinning:
                stop_spinning(encoder)
            return cls(encoder)
        index = SearchIndex.load(config.index)
        try:
            encoder = index.encoder(config.model, device=config.device, precision=config.precision)
            if not config.ort_spinning:
                stop_spinning(encoder)
            return cls(encoder, index)
        except BaseException:
            index.close()
            raise

    def count_tokens(self, texts: Sequence[str]) -> tuple[list[int], int]:
        """Each text's token count after truncation, and how many texts were truncated."""
        encodings = self.tokenizer.encode_batch(list(texts))
        return [len(e.ids) for e in encodings], sum(1 for e in encodings if e.overflowing)

    def run_batch(self, texts: list[str], tokens: list[int]) -> np.ndarray:
        """One batch through the model, as `encoder.encode` computes it (the model's own
        normalization): one forward pass per group of similar length (`length_groups`)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for group in length_groups(tokens):
            out[group] = self.encoder.encode([texts[i] for i in group], batch_size=len(group))
        return out

    def describe(self) -> str:
        return f"{self.name} ({self.backend}, {self.device}, {self.precision}, {self.dim}-d)"


def stop_spinning(encoder: Any) -> None:
    """Reopen an ONNX model on the CPU with ONNX Runtime's intra-op threads not spinning.

    By default the threads busy-wait for the next run after each one. An offline `encode` of large
    batches loses little by it, but a server runs many small length groups and shares the cores
    with its event loop (and often other processes): `benchmarks/serve.py` on 2 shared CPU cores
    served 40 instead of 25 sentences/s to 8 single-sentence clients without spinning, and 36
    instead of 23 to 32 (benchmarks/README.md). `OnnxEncoder` takes no such option, so its session
    is replaced (`--ort-spinning` keeps it).
    """
    if getattr(encoder, "backend", None) != "onnx" or str(encoder.device) != "cpu":
        return
    import onnxruntime as ort

    from embedkit.encode.onnx_backend import precision_files, session_options

    options = session_options()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    file = encoder.path / precision_files(encoder.metadata)[encoder.precision]
    encoder.session = ort.InferenceSession(
        str(file), sess_options=options, providers=["CPUExecutionProvider"]
    )


class Engine:
    """Loads the model in the background, batches embeddings and runs searches."""

    def __init__(self, config: ServeConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.model: ServedModel | None = None
        self.batcher: DynamicBatcher | None = None
        self.ready = False
        self.error: BaseException | None = None
        self.on_ready: Callable[[ServedModel], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self._index_thread = ThreadPoolExecutor(1, thread_name_prefix="embedkit-index")
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
            self.model = await loop.run_in_executor(self._index_thread, ServedModel.load, self.config)
            self.batcher = DynamicBatcher(
                self.model.run_batch,
                max_batch_tokens=self.config.max_batch_tokens,
                max_wait_ms=self.config.max_wait_ms,
                workers=self.config.workers,
                max_queue_texts=self.config.max_queue_texts,
                on_batch=self.metrics.observe_batch,
            )
            await self.batcher.start()
            await self.batcher.embed(["warm-up"], [3])
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
        if sum(map(len, texts)) > INLINE_TOKENIZE_CHARS:
            lengths, truncated = await asyncio.to_thread(self.model.count_tokens, texts)
        else:
            lengths, truncated = self.model.count_tokens(texts)
        vectors = await self.batcher.embed(texts, lengths)
        self.metrics.count_texts(len(texts), sum(lengths), truncated)
        return Embedded(vectors, sum(lengths), truncated)

    async def search(self, queries: list[str], k: int, mode: str | None = None) -> tuple[list[list], int]:
        """Each query's hits (`SearchIndex.search_text`), and how many queries were truncated.

        `mode` (dense, lexical, hybrid; None: the index's default) goes to `search_text`, which
        refuses lexical and hybrid on an index without a lexical side (`InputError`).
        """
        assert self.model is not None and self.model.index is not None
        index = self.model.index
        loop = asyncio.get_running_loop()
        encoder = BatchedEncoder(self, loop)
        search = functools.partial(index.search_text, queries, k, encoder=encoder, mode=mode)
        hits = await loop.run_in_executor(self._index_thread, search)
        return hits, encoder.truncated


class BatchedEncoder(EncoderBase):
    """The served encoder as `search_text` sees it, except that `encode` goes through the batcher.

    Called on the index thread: it hands the texts to the event loop and waits for their vectors,
    so that search queries share batches with embedding requests.
    """

    def __init__(self, engine: Engine, loop: asyncio.AbstractEventLoop) -> None:
        assert engine.model is not None
        self._engine = engine
        self._encoder = engine.model.encoder
        self._loop = loop
        self.truncated = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._encoder, name)  # path, dim, fingerprint, max_seq_length, ...

    def encode_texts(
        self, texts: list[str], batch_size: int, normalize: bool | None, progress: bool
    ) -> np.ndarray:
        items = texts
        if not items:
            return np.empty((0, self._encoder.dim), dtype=np.float32)
        result = asyncio.run_coroutine_threadsafe(self._engine.embed(items), self._loop).result()
        self.truncated += result.truncated
        vectors = result.vectors
        # As the encoder's own encode(normalize=True) does: only a model that does not normalize
        # gets normalized here, so that scores equal `embedkit search`'s to the last bit.
        if normalize and not getattr(self._encoder, "normalize_default", False):
            vectors = l2_normalize(vectors)
        return vectors


def hit_record(rank: int, hit: Any) -> dict[str, Any]:
    """One hit as JSON: as `embedkit search --json` writes it, with every extra score the hit has
    (hybrid search's dense, lexical and fused scores) and `metadata` always present."""
    record: dict[str, Any] = {"rank": rank, "id": hit.id, "score": float(hit.score)}
    for field in dataclasses.fields(hit):
        if field.name not in ("id", "score", "row", "document"):
            value = getattr(hit, field.name)
            record[field.name] = float(value) if isinstance(value, (float, np.floating)) else value
    doc = hit.document
    if doc is not None:
        record.update(title=doc.title, text=doc.text, metadata=doc.metadata or {})
    return record
