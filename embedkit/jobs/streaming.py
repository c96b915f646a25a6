"""Embed a corpus of any size, chunk by chunk, in bounded memory.

Two streaming passes over the corpus: the first counts the documents, so that outputs can be sized
up front; the second embeds chunks of documents and hands each chunk to a writer. Memory holds one
chunk of texts and vectors, never the corpus, so a corpus bigger than RAM embeds on a laptop.
`embed_to_file` writes a memory-mapped `.npy` (`numpy.lib.format.open_memmap`); `build_index`
embeds its chunks the same way (`embed_chunk`) into a FAISS index and its document store.

`embed_to_file` output, both written together (`embedkit.storage.atomic.atomic_files`: temporary files, a
journal, then renames; a kill during the renames is finished by the next run or `embedkit clean`),
by one writer at a time (`embedkit.storage.locking`):
- `FILE.npy`: float32 [n, dim], row i = the corpus's i-th document;
- `FILE.ids.txt`: the documents' ids, one per line, UTF-8, line i = row i (an id is the corpus's id
  field, or the document's 1-based line number when the corpus has none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.encode.truncation import CutDocuments
from embedkit.errors import InputError, RunFailure
from embedkit.jobs.run_report import EncoderRun, RunStart
from embedkit.progress import ProgressBar
from embedkit.storage.atomic import atomic_files
from embedkit.storage.locking import locked
from embedkit.storage.write_failures import npy_for_writing

if TYPE_CHECKING:
    from embedkit.data.corpus import Document, ReadStats
    from embedkit.encode.protocol import Encoder


@dataclass(frozen=True)
class CorpusOptions:
    """How to read and batch a corpus."""

    column: str | None = None  # the text field of a csv/tsv/jsonl corpus (None: "text")
    id_column: str | None = None  # the id field (None: "_id" or "id", else the line number)
    # 10k texts plus 10k x 384 float32 vectors (15 MB) stay small on any machine, while a chunk is
    # still large enough for the encoder's length-sorting to group similar lengths.
    chunk_size: int = 10_000
    batch_size: int = (
        64  # texts per forward pass: sentence-transformers' 32, doubled (sorting keeps padding low)
    )
    first_line_id: int = 0  # a .txt corpus's line n gets id first_line_id + n (an append goes on after)

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise InputError(f"chunk size must be at least 1, got {self.chunk_size}")
        if self.batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")


ChunkWriter = Callable[[int, "list[Document]", np.ndarray], None]  # (offset, documents, vectors [len, dim])
# a corpus file or folder, or documents already in memory (the Python API's `Collection.add`)
Corpus = str | Path | Sequence["Document"]


def read_corpus(corpus: Corpus, options: CorpusOptions, stats: ReadStats | None = None) -> Iterator[Document]:
    """Stream a corpus file or BEIR folder (txt, jsonl, csv/tsv, gzip), or documents given in
    memory, blank documents skipped (and counted in `stats`)."""
    from embedkit.data.corpus import read_documents

    if not isinstance(corpus, (str, Path)):
        return _given_documents(corpus, stats)
    return read_documents(
        corpus,
        column=options.column,
        id_column=options.id_column,
        stats=stats,
        first_line_id=options.first_line_id,
    )


def _given_documents(documents: Sequence[Document], stats: ReadStats | None) -> Iterator[Document]:
    for document in documents:
        blank = not (document.text.strip() or document.title.strip())
        if stats is not None:
            stats.blank += blank
            stats.read += not blank
        if not blank:
            yield document


def corpus_name(corpus: Corpus) -> str:
    """How a report names the corpus: its path, or "documents given" for documents in memory."""
    return str(corpus) if isinstance(corpus, (str, Path)) else "documents given"


def count_documents(corpus: str | Path, options: CorpusOptions) -> int:
    """Count a corpus's documents in one streaming pass; an empty corpus is an `InputError`."""
    count = sum(1 for _ in read_corpus(corpus, options))
    if count == 0:
        raise InputError(f"empty corpus: {corpus} holds no documents")
    return count


def chunked(items: Iterable[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def embed_corpus(
    encoder: Encoder,
    corpus: str | Path,
    write: ChunkWriter,
    *,
    expected: int,
    options: CorpusOptions,
    normalize: bool | None = None,
    progress: bool = False,
    description: str = "embedding",
    documents: Iterable[Document] | None = None,
    prefix: str = "",
) -> int:
    """Embed `corpus` chunk by chunk, calling `write(offset, documents, vectors)` for each chunk.

    `expected` is the count from `count_documents`; a corpus that changes between the two passes
    is a `RunFailure` (the caller's atomic write then leaves no partial output). `documents`, when
    given, are what is embedded instead of the whole corpus (a range of it: one part of a shard, or
    its passages). `prefix` goes before every text embedded (a model's passage prefix).
    """
    done = 0
    stream = read_corpus(corpus, options) if documents is None else documents
    with ProgressBar(expected, description, enabled=progress, rate_unit="sent/s", transient=True) as bar:
        for chunk in chunked(stream, options.chunk_size):
            if done + len(chunk) > expected:
                raise RunFailure(
                    f"{corpus} changed while it was read: more than the {expected} documents counted"
                )
            write(done, chunk, embed_chunk(encoder, chunk, options, normalize, prefix))
            done += len(chunk)
            bar.advance(len(chunk))
    if done != expected:
        raise RunFailure(f"{corpus} changed while it was read: {done} documents, {expected} counted")
    return done


def embed_chunk(
    encoder: Encoder,
    chunk: Sequence[Document],
    options: CorpusOptions,
    normalize: bool | None,
    prefix: str = "",
) -> np.ndarray:
    """The vectors of one chunk of documents (or passages): `prefix` + title + text, float32 [n, dim]."""
    texts = [prefix + doc.full_text for doc in chunk]
    vectors = encoder.encode(texts, batch_size=options.batch_size, normalize=normalize)
    return np.asarray(vectors, dtype=np.float32).reshape(len(chunk), -1)


@dataclass(frozen=True)
class EmbedReport(EncoderRun):
    """What `embed_to_file` wrote and how it went."""

    out: Path
    ids_path: Path
    truncated_ids: tuple[str, ...] = ()  # the first few documents cut (`embedkit.encode.truncation`)
    truncated_documents: int = 0


def ids_path_for(out: Path) -> Path:
    """`FILE.npy` -> `FILE.ids.txt`."""
    return out.with_name(out.name[: -len(".npy")] + ".ids.txt")


@locked("out")
def embed_to_file(
    corpus: str | Path,
    out: str | Path,
    model: Encoder | str | Path | None = None,
    *,
    options: CorpusOptions | None = None,
    normalize: bool | None = None,
    runtime: Runtime | None = None,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> EmbedReport:
    """Embed every document of `corpus` into `out` (.npy, float32 [n, dim]) and `FILE.ids.txt`.

    `model`: an open encoder, or a model folder (None: the bundled all-MiniLM-L6-v2) that is opened
    with `load_encoder(model, runtime=runtime)` once the corpus is known to be readable and not
    empty (`device=`, `precision=`: the older spelling of `runtime`). `normalize=None` keeps the
    model's own choice (its Normalize module).
    """
    runtime = runtime_of(runtime, device=device, precision=precision)
    out = Path(out)
    if out.suffix != ".npy" or out.is_dir():
        raise InputError(f"--out must be a .npy file name, got {out}")
    options = options or CorpusOptions()
    n = count_documents(corpus, options)
    encoder = as_encoder(model, runtime)
    ids_path = ids_path_for(out)
    start = RunStart.of(encoder)
    with atomic_files(out, ids_path) as (npy_tmp, ids_tmp):
        cut = _write_npy(encoder, corpus, npy_tmp, ids_tmp, n, options, normalize, progress)
    return EmbedReport.measured(
        encoder,
        start,
        count=n,
        out=out,
        ids_path=ids_path,
        truncated_ids=tuple(cut.names),
        truncated_documents=cut.count,
    )


def _write_npy(
    encoder: Encoder,
    corpus: str | Path,
    npy: Path,
    ids: Path,
    n: int,
    options: CorpusOptions,
    normalize: bool | None,
    progress: bool,
) -> CutDocuments:
    """Fill `npy` (a memory map of [n, dim]) and `ids`; the map is closed when this returns. Returns
    the documents the model cut at its maximum length."""
    matrix = npy_for_writing(npy, (n, encoder.dim))  # its space reserved: a full disk is no SIGBUS
    cut = CutDocuments()
    with ids.open("w", encoding="utf-8", newline="\n") as ids_file:

        def write(offset: int, documents: list[Document], vectors: np.ndarray) -> None:
            cut.note(encoder, documents)  # the chunk just embedded
            matrix[offset : offset + len(documents)] = vectors
            ids_file.writelines(f"{one_line_id(doc.id)}\n" for doc in documents)

        embed_corpus(
            encoder, corpus, write, expected=n, options=options, normalize=normalize, progress=progress
        )
    matrix.flush()
    return cut


def as_encoder(model: Encoder | str | Path | None, runtime: Runtime | None = None) -> Encoder:
    """An open encoder as is; a model folder (None: the bundled model) opened with `load_encoder`
    where `runtime` says (None: `Runtime()`'s defaults)."""
    if model is None or isinstance(model, (str, Path)):
        from embedkit.encode.loading import load_encoder

        return load_encoder(model, runtime=runtime or Runtime())
    return model


def one_line_id(doc_id: object) -> str:
    """A document's id as its line of an ids file; a line break inside it is an `InputError`."""
    text = str(doc_id)
    if "\n" in text or "\r" in text:
        raise InputError(f"document id {text!r} contains a line break; ids must be one line")
    return text
