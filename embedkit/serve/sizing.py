"""How large a server's batches are and how many are in flight, by the device the model runs on.

`ServeConfig` leaves a setting None to mean "by device"; `Sizing.resolve` fills it in once the
model is loaded and its device known. The CPU values are the ones measured on 2 shared cores
(`embedkit.serve.settings`); the CUDA values are sized from the H200 figures of the GPU half and
are estimates until `benchmarks/gpu.py` measures them:

- batch tokens: 4,096 on a CPU (no setting beat it on 2 cores); 32,768 on CUDA, the scale of the
  batches that reached ONNX Runtime's ceiling there (1,024 sentences of 38.6 tokens, about 40k
  tokens, 152,862 sentences/s), where 4,096-token batches left the GPU mostly idle.
- batches in flight: the workers' count on a CPU (one batch uses every core); 2 on CUDA, so that
  one batch is padded while the other runs (the GPU is handed the next one when it finishes).
- fixed shapes and the warm-up: on CUDA only (`embedkit.encode.shapes`): shapes of up to
  MAX_ROWS rows and twice the batch budget in padded tokens are run once at load.
- tokenization: on the event loop for requests under INLINE_TOKENIZE_CHARS (a thread hop costs
  more than a few sentences' tokenization); on CUDA the bound is a few sentences, so the loop
  stays free to feed a device that answers in milliseconds.
- batch shape: on a CPU a batch is cut into groups of similar length (padding is computed like
  any token there); on CUDA a batch is one bucket of the fixed shapes, one run
  (`ServedModel.prepare`).
- waiting: on a CPU a batch that is not full waits up to `max_wait_ms` (the clients just answered
  come back into one batch); on CUDA a batch starts at once while the device is idle, and texts
  gather only while a batch runs (`DynamicBatcher`'s `wait_when_idle`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embedkit.serve.settings import DEFAULT_MAX_BATCH_TOKENS as CPU_BATCH_TOKENS

DEFAULT_MAX_BATCH_TOKENS = {"cpu": CPU_BATCH_TOKENS, "cuda": 32_768}
DEFAULT_IN_FLIGHT = {"cuda": 2}  # the CPU's: as many as the inference workers
# Requests with more characters than this are tokenized in a thread, not in the event loop
# (about 5 ms of tokenization on one core); on CUDA a few sentences (under 0.2 ms, an estimate:
# not measured on a GPU machine), so single queries skip the thread hop.
INLINE_TOKENIZE_CHARS = {"cpu": 50_000, "cuda": 2_000}
# The queue's token bound when none is given, as estimates from reported rates (not measured
# here): on a CPU about 10 s of all-MiniLM-L6-v2 work on 2 cores (a 512k-token request was
# reported at 77 s); on a GPU about 5 s at the ~24k sentences/s of 38 tokens reported on an H100.
AUTO_QUEUE_TOKENS = {"cpu": 65_536, "cuda": 4_194_304}
# The most texts in one model run under fixed shapes: the batch size of the ceiling measurement.
MAX_ROWS = 1024


def device_kind(device: str) -> str:
    """ "cuda" for any CUDA device name ("cuda", "cuda:1"), else "cpu"."""
    return "cuda" if str(device).startswith("cuda") else "cpu"


@dataclass(frozen=True)
class Sizing:
    """The resolved batch and pipeline settings of one server."""

    device: str  # "cpu" or "cuda"
    max_batch_tokens: int
    workers: int  # inference threads
    batches_in_flight: int  # batches formed and not finished: being padded, waiting or running
    warmup: bool
    inline_tokenize_chars: int
    length_groups: bool  # cut a batch into length groups (CPU), else one bucket a batch (CUDA)
    wait_when_idle: bool  # a batch not full waits max_wait_ms even while nothing runs (CPU)
    max_queue_tokens: int
    max_rows: int

    @classmethod
    def resolve(cls, config: Any, device: str, max_seq_length: int) -> Sizing:
        """`config`'s settings (a `ServeConfig`), with those left None filled in for `device`."""
        kind = device_kind(device)
        in_flight = config.batches_in_flight or max(DEFAULT_IN_FLIGHT.get(kind, 1), config.workers)
        return cls(
            device=kind,
            max_batch_tokens=config.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS[kind],
            workers=config.workers,
            batches_in_flight=max(in_flight, config.workers),
            warmup=kind == "cuda" if config.runtime.warmup is None else config.runtime.warmup,
            inline_tokenize_chars=INLINE_TOKENIZE_CHARS[kind],
            length_groups=kind == "cpu",
            wait_when_idle=kind == "cpu",
            max_queue_tokens=max(config.max_queue_tokens or AUTO_QUEUE_TOKENS[kind], max_seq_length),
            max_rows=MAX_ROWS,
        )

    @property
    def prepares_ahead(self) -> bool:
        """Whether batches are padded on a thread of their own while others run."""
        return self.batches_in_flight > self.workers
