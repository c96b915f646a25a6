"""Tokenize, length-sort and batch texts, then restore the caller's order.

Shared by every encoder backend (torch and ONNX), so that both see exactly the same token ids.
Sorting by token length before batching keeps padding small (about 1.6-1.85x faster on every
backend on mixed-length text); the embeddings are written back in the caller's order.
No torch here: tokenization uses the `tokenizers` library directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from queue import Full, Queue
from typing import Any, TypeVar

import numpy as np

from embedkit.encode.model_folder import lowercases_text, read_json
from embedkit.encode.shapes import ShapePlan
from embedkit.errors import InputError
from embedkit.progress import ProgressBar

T = TypeVar("T")
U = TypeVar("U")
# Batches tokenized and padded ahead of the one running (`run_ahead`), by device. On CUDA the
# device waits for the CPU otherwise (an H200 profile: tokenize, pad and run one after the
# other). On the CPU the model already uses every core: on 2 loaded cores, ONNX fp32 over 500
# mixed sentences ran at 32.1 sentences/s with a worker thread against 37.9 without (36.4 for
# the batching before it; one process, interleaved, medians of 5): no worker thread there.
PREFETCH_BATCHES = {"cpu": 0, "cuda": 2}


def prefetch_for(device: object) -> int:
    """Batches prepared ahead on `device` ("cpu", "cuda", "cuda:1" or a torch.device)."""
    return PREFETCH_BATCHES["cuda" if str(device).startswith("cuda") else "cpu"]


def load_tokenizer(model_dir: Path, max_seq_length: int):  # -> tokenizers.Tokenizer
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


def _lowercase_first(tokenizer) -> None:  # tokenizer: tokenizers.Tokenizer
    """Put a Lowercase normalizer before the tokenizer's own, unless it has one (as
    sentence-transformers 6 does for `do_lower_case`)."""
    from tokenizers.normalizers import Lowercase, Sequence

    normalizer = tokenizer.normalizer
    steps = list(normalizer) if isinstance(normalizer, Sequence) else [normalizer] if normalizer else []
    if not any(isinstance(step, Lowercase) for step in steps):
        tokenizer.normalizer = Sequence([Lowercase(), *steps])


def encode_without_offsets(tokenizer, texts: list[str]) -> list[Any]:
    """`tokenizer`'s encodings of `texts` without their character offsets, which embedding never
    reads: `encode_batch_fast` (the same ids, masks and overflow; 0.80 s against 1.00 s for
    28,481 texts on 2 cores), or `encode_batch` where a tokenizer has no such method."""
    return getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)(texts)


def pad_token_id(model_dir: Path, tokenizer) -> int:
    config_path = Path(model_dir) / "tokenizer_config.json"
    pad_token = read_json(config_path).get("pad_token") if config_path.is_file() else None
    if isinstance(pad_token, dict):  # older tokenizer_config files store an AddedToken
        pad_token = pad_token.get("content")
    token_id = tokenizer.token_to_id(pad_token or "[PAD]")
    return int(token_id) if token_id is not None else 0


@dataclass
class Batch:
    """One padded batch; `indices` are the rows' positions in the caller's list.

    Under fixed shapes (`embedkit.encode.shapes`) the arrays may hold more rows than `indices`:
    the extra rows are empty and their outputs are dropped (`real_rows`).
    """

    indices: np.ndarray  # (n,)
    input_ids: np.ndarray  # (B, T) int64, B >= n
    attention_mask: np.ndarray  # (B, T) int64
    token_type_ids: np.ndarray  # (B, T) int64

    @property
    def real_rows(self) -> int:
        return len(self.indices)


# Texts tokenized at once, in batches: large enough for the tokenizer's own threads, small enough
# that the first batch is ready soon and the next ones are tokenized while earlier ones run.
CHUNK_TEXTS = 4096
# A text is cut to max_seq_length tokens, but the tokenizer reads all of it first: 5 MB took 8 s
# here, for 256 tokens. Real words take far fewer than this many characters a token (WordPiece
# makes one [UNK] of any word over 100), so the first max_seq_length tokens always lie within
# max_seq_length * _CHARS_PER_TOKEN characters and the rest need not be read.
_CHARS_PER_TOKEN = 1000


class TokenBatcher:
    """Turns a list of texts into length-sorted, padded batches of numpy arrays."""

    def __init__(self, model_dir: Path, max_seq_length: int) -> None:
        self.max_seq_length = max_seq_length
        self.tokenizer = load_tokenizer(model_dir, max_seq_length)
        self.pad_id = pad_token_id(model_dir, self.tokenizer)
        self.truncated = 0  # texts cut at max_seq_length, summed over calls
        self.cut_positions: list[int] = []  # those of the latest `batches` call, by the caller's position

    def batches(
        self, texts: Sequence[str], batch_size: int, shapes: ShapePlan | None = None, ahead: bool = False
    ) -> Iterator[Batch]:
        """Batches of texts of similar token length, longest first, padded as `shapes` says.

        The texts are ordered by characters first (free), then tokenized in chunks of about
        CHUNK_TEXTS and ordered by tokens within each chunk: a consumer gets its first batch after
        one chunk's tokenization, not the whole list's, and the batches pad about as little as a
        global sort. `ahead` tokenizes the next chunk in a thread of its own while this one's
        batches are padded and run: on an H200 the tokenizer (0.26 s for 28,481 texts), the padding
        (0.18 s) and the model (0.20 s) took 0.57 s nearly one after another, and 0.48 s with this
        (benchmarks/README.md, "The GPU half").
        """
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        chars = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        by_chars = np.argsort(-chars, kind="stable")  # longest first: a too-large batch fails at once
        chunk = batch_size * max(1, -(-CHUNK_TEXTS // batch_size))  # whole batches per chunk
        parts = [by_chars[start : start + chunk] for start in range(0, len(by_chars), chunk)]
        limit = self.max_seq_length * _CHARS_PER_TOKEN

        def tokenized(part: np.ndarray) -> list[Any]:
            return self._encode([texts[i][:limit] for i in part], part)

        self.cut_positions = []
        for part, encodings in zip(parts, _in_turn(tokenized, parts, ahead), strict=True):
            cut = [int(i) for i, e in zip(part.tolist(), encodings, strict=True) if e.overflowing]
            self.truncated += len(cut)
            self.cut_positions += cut  # `embedkit.encode.truncation` names their documents
            lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))  # tokens
            order = np.argsort(-lengths, kind="stable")
            for first in range(0, len(order), batch_size):
                rows = order[first : first + batch_size]
                batch = pad_encodings(encodings, rows, self.pad_id, shapes=shapes, max_rows=batch_size)
                batch.indices = part[rows]
                yield batch


    def _encode(self, texts: list[str], positions: np.ndarray) -> list[Any]:
        """The tokenizer's encodings; a text it cannot take (a lone surrogate: bytes that were not
        UTF-8, or a JSON escape) is an `InputError` naming it, never the tokenizer's TypeError."""
        try:
            return encode_without_offsets(self.tokenizer, texts)
        except TypeError:
            from embedkit.data.values import check_text

            for i, text in zip(positions.tolist(), texts, strict=True):  # i: in the caller's order
                if not isinstance(text, str):
                    kind = type(text).__name__
                    raise InputError(f"text {i + 1} to embed is {kind}, not a string") from None
                check_text(text, f"text {i + 1} to embed ({text[:40]!r})")
            raise


def _in_turn(work: Callable[[T], U], items: Sequence[T], ahead: bool) -> Iterator[U]:
    """`work(item)` of each item in order; with `ahead`, the next item's work runs in a thread of
    its own while the caller uses this one's (the tokenizer releases the GIL). An error is raised
    where its result is taken; a caller that stops early waits for the one piece of work in flight."""
    if not ahead or len(items) < 2:
        yield from map(work, items)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="embedkit-tokenize-ahead") as pool:
        pending = pool.submit(work, items[0])
        for following in [*items[1:], None]:
            done = pending.result()
            if following is not None:
                pending = pool.submit(work, following)
            yield done


def pad_encodings(
    encodings: Sequence[Any],
    rows: np.ndarray,
    pad_id: int,
    width: int | None = None,
    *,
    shapes: ShapePlan | None = None,
    max_rows: int | None = None,
) -> Batch:
    """The tokenized texts `rows` of `encodings`, padded to the longest of them (or to `width`), (B, T).

    With `shapes`, the length and the row count are padded up to the plan's buckets (rows within
    `max_rows`); extra rows attend to one pad token, so that no pooling divides by zero.
    Vectorised: each row's ids are read once, then placed by one boolean mask.
    """
    rows = np.asarray(rows, dtype=np.int64)
    ids_lists = [encodings[i].ids for i in rows]
    lengths = np.fromiter(map(len, ids_lists), dtype=np.int64, count=len(rows))
    count = len(rows)
    width = width or int(lengths.max(initial=1))
    height = count
    if shapes is not None:
        width = shapes.length(width)
        height = shapes.rows(count, max(max_rows or count, count))
    real = np.arange(width) < lengths[:, None]  # (n, T): each row's tokens, left-aligned
    ids = np.full((height, width), pad_id, dtype=np.int64)
    types = np.zeros((height, width), dtype=np.int64)
    mask = np.zeros((height, width), dtype=np.int64)
    total = int(lengths.sum())
    ids[:count][real] = np.fromiter(chain.from_iterable(ids_lists), dtype=np.int64, count=total)
    types[:count][real] = np.fromiter(
        chain.from_iterable(encodings[i].type_ids for i in rows), dtype=np.int64, count=total
    )
    mask[:count] = real
    mask[count:, 0] = 1
    return Batch(rows, ids, mask, types)


def run_ahead(items: Iterable[T], depth: int) -> Iterator[T]:
    """`items`, produced in a worker thread up to `depth` ahead of the consumer (0: in this thread).

    While the consumer runs batch k on the model, the worker tokenizes and pads batches k+1 to
    k+depth (the tokenizer, NumPy and ONNX Runtime release the GIL). The queue is bounded, so a
    slow consumer holds at most `depth` prepared batches plus the one being prepared. An error in
    the worker is raised in the consumer; a consumer that stops early stops the worker.
    """
    if depth < 1:
        yield from items
        return
    queue: Queue = Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                queue.put(entry, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(items)
        try:
            for item in iterator:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the consumer, which raises it
            put(("error", exc))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="embedkit-tokenize", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = queue.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        worker.join()


def as_text_list(texts: str | Sequence[str]) -> tuple[list[str], bool]:
    """A list of texts and whether the caller passed a single string."""
    if isinstance(texts, str):
        return [texts], True
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"text {i} is {type(text).__name__}, not str")
    return texts, False


def encode_in_order(
    batcher: TokenBatcher,
    texts: Sequence[str],
    batch_size: int,
    dim: int,
    run_batch: Callable[[Batch], np.ndarray],
    progress: bool = False,
    description: str = "embedding",
    shapes: ShapePlan | None = None,
    prefetch: int = 0,
) -> np.ndarray:
    """Run `run_batch` over length-sorted batches and return float32 [n, dim] in input order.

    The next `prefetch` batches are tokenized and padded in a worker thread while one runs
    (`run_ahead`; `prefetch_for(device)` says how many); `shapes` pads them to fixed shapes.
    `run_batch` returns one row per real text of the batch, or one per padded row (dropped here).
    """
    out = np.empty((len(texts), dim), dtype=np.float32)
    if not len(texts):
        return out
    with ProgressBar(len(texts), description, enabled=progress, rate_unit="sent/s", transient=True) as bar:
        for batch in run_ahead(batcher.batches(texts, batch_size, shapes, ahead=prefetch > 0), prefetch):
            out[batch.indices] = run_batch(batch)[: batch.real_rows]
            bar.advance(batch.real_rows)
    return out


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
