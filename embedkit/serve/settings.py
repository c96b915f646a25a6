"""What `embedkit serve` is asked to do, and its defaults; standard library only (the CLI imports it).

Defaults and where they come from:
- `max_batch_tokens` None, by device (`embedkit.serve.sizing`): 4096 on a CPU (tokens summed over a
  batch's texts, as text-embeddings-inference's `--max-batch-tokens` counts them; about 160
  Wikipedia sentences) and `max_wait_ms` 5 (infinity's `batch_delay`): `benchmarks/serve.py --tune`
  on the exported all-MiniLM-L6-v2 (2 shared CPU cores) found no setting better beyond the machine's
  noise: 32 single-sentence clients got 74-86% of the offline rate with every wait from 0 to 10 ms
  and budget from 1,024 to 16,384 tokens, and the defaults 74% and 84% in two runs
  (benchmarks/README.md). On a CPU a larger budget only makes one batch's latency longer. The wait
  lets concurrent clients that were answered together come back into one batch. On CUDA 32,768
  (estimated from the GPU's ceiling batches; see sizing).
- `max_texts` 2048: the OpenAI embeddings API's limit on inputs per request.
- `max_body_bytes` 8 MiB: 2048 texts of 4,000 characters; larger bodies are refused while reading.
- `max_queue_tokens` None (by device, `sizing.AUTO_QUEUE_TOKENS`: 65,536 on a CPU): tokens waiting
  for a batch, beyond which a request is refused with 503 and `Retry-After`, so that one request
  of long texts cannot hold the model for a minute (a 2,000-text request of 4 KB texts, 512k
  tokens, was reported to take 77 s on 2 CPU cores, about 6,600 tokens/s, so 65,536 tokens is about
  10 s there; not re-measured); a request larger than the whole bound is a 413.
- `max_queue_texts` 16384: texts waiting for a batch, beyond which a request is refused with 503
  (on two CPU cores, a minute of work: a client would time out before its turn anyway).
- `workers` 1: inference threads, each running whole batches on the one loaded model (ONNX
  Runtime's `run` is thread-safe). On a CPU one batch already uses every core (its intra-op
  threads); a second worker on a GPU overlaps one batch's tokenization and copies with the next
  one's compute.
- `batches_in_flight` None, by device: the workers' count on a CPU; 2 on CUDA (one batch padded
  to its fixed shapes while another runs).
- `runtime` (`embedkit.encode.runtime.Runtime`: device, precision, threads, warm-up, tokenizer
  workers, CUDA graphs) with its defaults, but for `spinning` False (`SERVER_RUNTIME`): ONNX
  Runtime's threads sleep between runs (`served_model.ServedModel.load` says why). Its `warmup`
  is the server's: None, on CUDA, the fixed shapes run once at load (`embedkit.encode.shapes`);
  its tokenizer workers tokenize ahead of the model in the encoder's own `encode` calls (an
  index's queries). The index is searched with faiss on the CPU whatever the device.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError

DEFAULT_MAX_BATCH_TOKENS = 4096  # on a CPU; by device: embedkit.serve.sizing
DEFAULT_MAX_WAIT_MS = 5.0
DEFAULT_MAX_TEXTS = 2048
DEFAULT_MAX_BODY_BYTES = 8 * 2**20
DEFAULT_MAX_QUEUE_TEXTS = 16384
DEFAULT_MAX_K = 1000
SERVER_RUNTIME = Runtime(spinning=False)  # see `served_model.ServedModel.load` for why


def _header_safe(value: str) -> bool:
    """Printable ASCII, the characters every HTTP client sends in a header as they are."""
    return all(" " <= c <= "~" for c in value)


@dataclass(frozen=True)
class ServeConfig:
    """One server's settings; `check()` turns bad values into an `InputError`."""

    model: str | None = None  # model folder; None: the index's model, else the bundled one
    index: str | None = None  # index folder for /search, or a pushed collection's URI (embedkit.remote)
    collection: str | None = None  # the collection of a remote `index`
    token: str | None = None  # its server's token (else $MILVUS_TOKEN)
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (the URL printed on start says which)
    runtime: Runtime = SERVER_RUNTIME  # device, precision, threads, warm-up, tokenizer workers
    api_key: str | None = None  # required as `Authorization: Bearer KEY` on every route but /health
    max_batch_tokens: int | None = None  # None: by device (sizing.DEFAULT_MAX_BATCH_TOKENS)
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    workers: int = 1
    batches_in_flight: int | None = None  # None: by device (sizing.DEFAULT_IN_FLIGHT)
    max_texts: int = DEFAULT_MAX_TEXTS  # texts (or queries) in one request
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_queue_texts: int = DEFAULT_MAX_QUEUE_TEXTS
    max_queue_tokens: int | None = None  # None: by device (sizing.AUTO_QUEUE_TOKENS)
    max_k: int = DEFAULT_MAX_K
    access_log: bool = False
    served_model_name: str | None = None  # None: the model's own name (embedkit.encode.model_name)
    rerank: str | None = None  # a cross-encoder folder for /rerank and /search's rerank_depth
    # more model folders served beside `model` for embeddings, each batched on its own and chosen
    # by the OpenAI `model` field (`serve --model A --model B`)
    extra_models: tuple[str, ...] = ()
    # more index folders served beside `index`, each with its own model (the index's), for /search
    # with that model's name in `model` (`serve --index A --index B`)
    extra_indexes: tuple[str, ...] = ()

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InputError(f"--port must be 0 to 65535, got {self.port}")
        if self.api_key is not None and (not self.api_key.strip() or self.api_key != self.api_key.strip()):
            raise InputError("the API key is empty or has surrounding spaces")
        if self.api_key is not None and not _header_safe(self.api_key):
            # HTTP header values are bytes: clients send non-ASCII as UTF-8, Latin-1 or not at all
            # (httpx and requests refuse it), and the server reads Latin-1, so such a key never matches.
            raise InputError(
                "the API key must be printable ASCII (letters, digits, punctuation): a key with other "
                "characters cannot be sent the same way by every HTTP client"
            )
        positive = ("workers", "max_texts", "max_body_bytes", "max_queue_texts", "max_k")
        for name in positive:
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("max_batch_tokens", "max_queue_tokens", "batches_in_flight"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.served_model_name is not None and not self.served_model_name.strip():
            raise InputError("--served-model-name is empty")
        if self.max_wait_ms < 0:
            raise InputError(f"--max-wait-ms must be 0 or more, got {self.max_wait_ms}")
        if (self.extra_models or self.extra_indexes) and self.served_model_name is not None:
            raise InputError("--served-model-name names one model: it cannot go with several models")
        if self.extra_indexes and self.index is None:
            raise InputError("several --index folders: the first is served with the first model")
        if self.max_queue_texts < self.max_texts:
            raise InputError("the queue limit must hold at least one request of --max-texts texts")

    def for_extra_model(self, model: str | None, index: str | None = None) -> ServeConfig:
        """The settings of one extra model's own engine (with `index`: that index's model, and the
        index): this server's limits, no re-ranker."""
        return replace(
            self, model=model, index=index, collection=None, rerank=None, extra_models=(), extra_indexes=()
        )

    @property
    def loopback(self) -> bool:
        """Whether `host` is reachable from this machine only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name: assume it is reachable from elsewhere
            return False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
