"""Tokenize, length-sort and batch texts, then restore the caller's order.

Shared by every encoder backend (torch and ONNX), so that both see exactly the same token ids.
Sorting by token length before batching keeps padding small (about 1.6-1.85x faster on every
backend on mixed-length text); the embeddings are written back in the caller's order.
No torch here: tokenization uses the `tokenizers` library directly.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from embedkit.encode.json_file import read_json
from embedkit.encode.model_folder import lowercases_text
from embedkit.encode.shapes import ShapePlan
from embedkit.encode.token_arrays import Batch, StageTimes, Tokens, pad_rows, tokens_of
from embedkit.errors import InputError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

T = TypeVar("T")
U = TypeVar("U")
# Tokenizer worker threads by device, when none are asked for. On CUDA the device waits for the
# CPU otherwise (an H200 profile: tokenize, pad and run one after the other). On the CPU the model
# already uses every core: on 2 loaded cores, ONNX fp32 over 500 mixed sentences ran at 32.1
# sentences/s with a worker thread against 37.9 without (one process, interleaved, medians of 5):
# none there.
MAX_TOKENIZER_WORKERS = 4


WORKERS_ENV = "EMBEDKIT_TOKENIZER_WORKERS"  # every command's setting (`serve --tokenizer-workers` too)


def tokenizer_workers_for(device: object, cores: int | None = None) -> int:
    """Threads that tokenize and pad ahead of the model on `device` ("cpu", "cuda", "cuda:1" or a
    torch.device): $EMBEDKIT_TOKENIZER_WORKERS where set; else none on the CPU, and on CUDA one per
    4 of the machine's cores, 1 to MAX_TOKENIZER_WORKERS (each one's tokenizer already spreads a
    chunk over every core, so a few keep the queue full while one is in its Python part)."""
    asked = os.environ.get(WORKERS_ENV, "").strip()
    if asked:
        if not asked.isdigit():
            raise InputError(f"${WORKERS_ENV} must be a whole number of threads, got {asked!r}")
        return int(check_tokenizer_workers(int(asked)) or 0)
    if not str(device).startswith("cuda"):
        return 0
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    return max(1, min(MAX_TOKENIZER_WORKERS, cores // 4))


def check_tokenizer_workers(workers: int | None) -> int | None:
    if workers is not None and (isinstance(workers, bool) or not 0 <= workers <= 64):
        raise InputError(f"tokenizer workers must be 0 (none: in the caller's thread) to 64, got {workers}")
    return workers


def load_tokenizer(model_dir: Path, max_seq_length: int) -> Tokenizer:
    """The folder's fast tokenizer with truncation at `max_seq_length` and padding off.

    A tokenizer that cannot tokenize text (an empty or zeroed `vocab.txt`) is an `InputError`
    naming the damaged folder, here and not at the first batch.
    """
    import os

    from tokenizers import Tokenizer

    from embedkit.data.input_files import check_input_file

    # Files a tokenizer is built from; a FIFO among them would hang the library that opens it.
    names = ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
             "special_tokens_map.json", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model")
    for name in names:
        if os.path.lexists(Path(model_dir) / name):
            check_input_file(Path(model_dir) / name, "tokenizer file")
    path = Path(model_dir) / "tokenizer.json"
    if path.is_file():
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for a truncated or damaged file
            reason = " ".join(str(exc).split())[:120]
            raise InputError(f"cannot read the tokenizer {path} ({reason}): the model folder is damaged") \
                from None
    else:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise InputError(f"{model_dir} has no tokenizer.json") from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir)).backend_tokenizer
        except Exception as exc:  # transformers raises many kinds for a bad folder
            raise InputError(f"cannot load a tokenizer from {model_dir}: {exc}") from None
    # Words no vocabulary holds whole: a WordPiece vocabulary without its [UNK] (an empty or zeroed
    # vocab.txt) fails on them here, rather than on the first unusual word of a corpus.
    try:
        tokenizer.encode("embedkit probes its tokenizer: zqxjv \u2603 \u0b90 42")
    except Exception as exc:  # tokenizers raises a bare Exception ("WordPiece error: Missing [UNK]")
        reason = " ".join(str(exc).split())[:120]
        raise InputError(
            f"the tokenizer of {model_dir} cannot tokenize text ({reason}): its vocab.txt or "
            "tokenizer files are empty or damaged; the model folder is damaged"
        ) from None
    if lowercases_text(Path(model_dir)):
        _lowercase_first(tokenizer)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_seq_length)
    return tokenizer


def _lowercase_first(tokenizer: Tokenizer) -> None:
    """Put a Lowercase normalizer before the tokenizer's own, unless it has one (as
    sentence-transformers 6 does for `do_lower_case`)."""
    from tokenizers.normalizers import Lowercase, Sequence

    normalizer = tokenizer.normalizer
    held: Any = normalizer  # tokenizers' Sequence normalizer iterates its steps (its stubs say not)
    steps = list(held) if isinstance(normalizer, Sequence) else [normalizer] if normalizer else []
    if not any(isinstance(step, Lowercase) for step in steps):
        tokenizer.normalizer = Sequence([Lowercase(), *steps])


def encode_without_offsets(tokenizer: Tokenizer, texts: list[str]) -> list[Encoding]:
    """`tokenizer`'s encodings of `texts` without their character offsets, which embedding never
    reads: `encode_batch_fast` (the same ids, masks and overflow; 0.80 s against 1.00 s for
    28,481 texts on 2 cores), or `encode_batch` where a tokenizer has no such method."""
    # tokenizers has `encode_batch_fast` since 0.20.2 (the floor, 0.21, has it); a stand-in with
    # only `encode_batch` (`TokenBatcher.of`'s, a test's) is probed for it, the library's version not
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    encodings: list[Encoding] = encode(texts)
    return encodings


def pad_token_id(model_dir: Path, tokenizer: Tokenizer) -> int:
    config_path = Path(model_dir) / "tokenizer_config.json"
    pad_token = read_json(config_path).get("pad_token") if config_path.is_file() else None
    if isinstance(pad_token, dict):  # older tokenizer_config files store an AddedToken
        pad_token = pad_token.get("content")
    token_id = tokenizer.token_to_id(pad_token or "[PAD]")
    return int(token_id) if token_id is not None else 0


# Texts tokenized at once, in batches: large enough for the tokenizer's own threads, small enough
# that the first batch is ready soon and the next ones are tokenized while earlier ones run.
CHUNK_TEXTS = 4096
# With fixed shapes (CUDA), chunks of about this many texts: tokenizing the first chunk and running
# the last one are the pipeline's fill and drain, which overlap nothing; at 4,096 texts they were
# 2 of the 7 chunks of the 28,481 texts of benchmarks/gpu.py. Lengths are padded to 16-token
# buckets there anyway, so a smaller window of the sort by tokens costs little padding.
FIXED_SHAPE_CHUNK_TEXTS = 1024
# A text is cut to max_seq_length tokens, but the tokenizer reads all of it first: 5 MB took 8 s
# here, for 256 tokens. Real words take far fewer than this many characters a token (WordPiece
# makes one [UNK] of any word over 100), so the first max_seq_length tokens always lie within
# max_seq_length * _CHARS_PER_TOKEN characters and the rest need not be read.
_CHARS_PER_TOKEN = 1000


class TokenBatcher:
    """The *prepare* stage: texts to length-sorted, padded batches of NumPy arrays.

    `tokenize` gives a flat table of ids (`embedkit.encode.token_arrays.Tokens`), `pad` cuts one
    batch of one shape from it, and `batches` does both for a whole list, in chunks, with
    `workers` threads tokenizing chunks ahead (each with a tokenizer of its own). `times` sums
    the seconds spent tokenizing and padding (the host split `make gpu-check` reports).
    """

    def __init__(self, model_dir: Path, max_seq_length: int) -> None:
        tokenizer = load_tokenizer(model_dir, max_seq_length)
        self._open(tokenizer, max_seq_length, pad_token_id(model_dir, tokenizer))

    @classmethod
    def of(cls, tokenizer: Any, max_seq_length: int, pad_id: int) -> TokenBatcher:
        """A batcher around an open tokenizer that already truncates at `max_seq_length`."""
        batcher = cls.__new__(cls)
        batcher._open(tokenizer, max_seq_length, pad_id)
        return batcher

    def _open(self, tokenizer: Any, max_seq_length: int, pad_id: int) -> None:
        self.max_seq_length = max_seq_length
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self.truncated = 0  # texts cut at max_seq_length, summed over calls
        self.cut_positions: list[int] = []  # those of the latest `batches` call, by the caller's position
        self.times = StageTimes()
        # A lone text's type ids are 0 under the usual post-processors; a tokenizer that says
        # otherwise has them read and padded like the ids.
        self.keep_types = any(encode_without_offsets(tokenizer, ["embedkit"])[0].type_ids)
        self._local = threading.local()  # each worker thread's own tokenizer

    def tokenize(self, texts: Sequence[str], positions: np.ndarray | None = None) -> Tokens:
        """The texts' ids in one flat table (truncated at max_seq_length; `truncated` counts them).

        `positions`: the texts' places in the caller's list, for naming a text the tokenizer
        cannot take."""
        limit = self.max_seq_length * _CHARS_PER_TOKEN
        positions = np.arange(len(texts)) if positions is None else positions
        start = time.perf_counter()
        cut = [text[:limit] if isinstance(text, str) else text for text in texts]
        encodings = self._encode(cut, positions)
        tokens = tokens_of(encodings, self.keep_types)
        self.truncated += int(tokens.truncated.sum())  # one += at a time: the GIL
        # by the caller's position: `embedkit.encode.truncation` names their documents
        self.cut_positions += [int(i) for i in np.asarray(positions)[tokens.truncated]]
        self.times.add("tokenize_s", time.perf_counter() - start)
        return tokens

    def pad(self, tokens: Tokens, rows: np.ndarray, **options: Any) -> Batch:
        """One batch of the texts `rows` of `tokens` (`pad_rows`'s options), timed."""
        start = time.perf_counter()
        batch = pad_rows(tokens, rows, self.pad_id, **options)
        self.times.add("pad_s", time.perf_counter() - start)
        return batch

    def batches(
        self,
        texts: Sequence[str],
        batch_size: int,
        shapes: ShapePlan | None = None,
        ahead: bool = False,
        *,
        workers: int | None = None,
        dtype: Any = np.int64,
        type_ids: bool = True,
    ) -> Iterator[Batch]:
        """Batches of texts of similar token length, longest first, padded as `shapes` says.

        The texts are ordered by characters first (free), then tokenized in chunks of about
        CHUNK_TEXTS (FIXED_SHAPE_CHUNK_TEXTS with fixed shapes) and ordered by tokens within each
        chunk: a consumer gets its first batch after
        one chunk's tokenization, not the whole list's, and the batches pad about as little as a
        global sort. With `workers` (`ahead`: one), that many threads tokenize and pad the next
        chunks while the consumer runs this one's batches: on an H200 the tokenizer, the padding
        and the model took nearly one after another otherwise (benchmarks/README.md, "The GPU
        half"). The batches, and so the vectors, are the same whatever the worker count.
        """
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        chars = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        by_chars = np.argsort(-chars, kind="stable")  # longest first: a too-large batch fails at once
        window = FIXED_SHAPE_CHUNK_TEXTS if shapes is not None and shapes.fixed else CHUNK_TEXTS
        chunk = batch_size * max(1, -(-window // batch_size))  # whole batches per chunk
        parts = [by_chars[start : start + chunk] for start in range(0, len(by_chars), chunk)]
        options = {"shapes": shapes, "max_rows": batch_size, "dtype": dtype, "type_ids": type_ids}

        def prepared(part: np.ndarray) -> list[Batch]:
            tokens = self.tokenize([texts[i] for i in part], part)
            order = np.argsort(-tokens.lengths, kind="stable")
            out = []
            for first in range(0, len(order), batch_size):
                batch = self.pad(tokens, order[first : first + batch_size], **options)
                batch.indices = part[batch.indices]
                out.append(batch)
            return out

        self.cut_positions = []
        count = (1 if ahead else 0) if workers is None else workers
        for batches in in_order(prepared, parts, count, self._start_worker):
            yield from batches

    def _start_worker(self) -> None:
        """In a new worker thread: a tokenizer of its own (one instance a thread, as TEI's workers)."""
        tokenizer = self.tokenizer
        # tokenizers' `Tokenizer` has `from_str`/`to_str` (every version embedkit allows, >= 0.21);
        # a stand-in handed to `TokenBatcher.of` (a test's) may not, and is then shared
        make = getattr(type(tokenizer), "from_str", None)
        own = make(tokenizer.to_str()) if make is not None and hasattr(tokenizer, "to_str") else None
        self._local.tokenizer = own or tokenizer

    def _encode(self, texts: list[str], positions: np.ndarray) -> list[Any]:
        """The tokenizer's encodings; a text it cannot take (a lone surrogate: bytes that were not
        UTF-8, or a JSON escape) is an `InputError` naming it, never the tokenizer's TypeError."""
        try:
            return encode_without_offsets(getattr(self._local, "tokenizer", self.tokenizer), texts)
        except TypeError:
            from embedkit.data.values import check_text

            for i, text in zip(positions.tolist(), texts, strict=True):  # i: in the caller's order
                if not isinstance(text, str):
                    kind = type(text).__name__
                    raise InputError(f"text {i + 1} to embed is {kind}, not a string") from None
                check_text(text, f"text {i + 1} to embed ({text[:40]!r})")
            raise


# Chunks prepared ahead of the one the model runs, at most (the bounded queue): deep enough that
# chunks of long texts (slow to tokenize) and of short ones (quick) even out against a device of
# steady pace; with a stand-in model matched to the host on 2 cores, a queue of 2 chunks left the
# pass at 1.29 times its slower stage (benchmarks/README.md, "The host path in arrays").
QUEUE_CHUNKS = 8


def in_order(
    work: Callable[[T], U], items: Sequence[T], workers: int, start: Callable[[], None] | None = None
) -> Iterator[U]:
    """`work(item)` of each item, in the items' order; with `workers`, that many threads work on
    the next items while the caller uses this one's (the tokenizer releases the GIL), at most
    max(QUEUE_CHUNKS, workers + 1) results ahead (a bounded queue). `start` runs once in each new
    thread. An error is raised where its result is taken; a caller that stops early waits for the
    work in flight."""
    if workers < 1 or len(items) < 2:
        yield from map(work, items)
        return
    depth = max(QUEUE_CHUNKS, workers + 1)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="embedkit-tokenize", initializer=start)
    pending: deque[Future[U]] = deque()
    try:
        pending.extend(pool.submit(work, item) for item in items[:depth])
        following = iter(items[depth:])
        while pending:
            done = pending.popleft().result()
            for item in islice(following, 1):
                pending.append(pool.submit(work, item))
            yield done
    finally:
        for future in pending:
            future.cancel()
        # a generator dropped without close() can be finalized on one of its own threads
        pool.shutdown(wait=not threading.current_thread().name.startswith("embedkit-tokenize"))


def pad_encodings(
    encodings: Sequence[Any],
    rows: np.ndarray,
    pad_id: int,
    width: int | None = None,
    *,
    shapes: ShapePlan | None = None,
    max_rows: int | None = None,
) -> Batch:
    """The tokenized texts `rows` of `encodings`, padded to the longest of them (or to `width`),
    int64 (B, T) with their type ids: `pad_rows` over the table of those rows (training's batches)."""
    rows = np.asarray(rows, dtype=np.int64)
    table = tokens_of([encodings[i] for i in rows], keep_types=True)
    batch = pad_rows(table, np.arange(len(rows)), pad_id, width, shapes=shapes, max_rows=max_rows)
    batch.indices = rows
    return batch


def as_text_list(texts: str | Sequence[str]) -> tuple[list[str], bool]:
    """A list of texts and whether the caller passed a single string."""
    if isinstance(texts, str):
        return [texts], True
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {i} is {type(text).__name__}, not str")
    return texts, False


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    normalized: np.ndarray = vectors / np.maximum(norms, 1e-12)  # numpy types an untyped array's quotient Any
    return normalized
