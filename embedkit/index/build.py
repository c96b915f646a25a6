"""Building an index folder from a corpus, or appending a corpus to one.

Every write builds a complete version inside INDEX_DIR and makes it live in one rename
(`embedkit.storage.versioned`); an append works on a copy. A crash at any point leaves the previous index
intact, and one writer at a time holds the index (`embedkit.storage.locking`).

Kinds: `flat` (exact), `hnsw` (graph, approximate, fast), `ivf-pq` (compressed, for corpora whose
vectors do not fit in memory). `auto` picks flat under `AUTO_FLAT_MAX` vectors, HNSW above, and
IVF-PQ when an HNSW index would take more than half of this machine's memory (or on the GPU,
where faiss has no HNSW).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.corpus import ReadStats, is_line_file
from embedkit.encode.default_onnx import recorded_model_path
from embedkit.encode.prefixes import check_recorded, recorded_prefixes, resolve_prefixes
from embedkit.errors import InputError
from embedkit.index.corpus_fingerprint import combined, count_and_fingerprint
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.kinds import (
    KINDS,
    choose_kind,
    index_params,
    new_faiss_index,
    train_ivf,
)
from embedkit.index.lexical import LexicalSettings
from embedkit.index.meta import IndexMeta, new_index_id, now
from embedkit.index.passages import Passage, PassageSettings, PassageSplitter, passage_settings
from embedkit.index.rows import add_rows
from embedkit.index.version_copy import copy_store, read_faiss_copy, write_faiss
from embedkit.jobs.streaming import CorpusOptions, as_encoder, embed_corpus, read_corpus
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.write_failures import npy_for_writing

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.encode.prefixes import Prefixes
    from embedkit.encode.protocol import Encoder

from embedkit.index.folder import (
    DOCS_FILE,
    INDEX_FILE,
    META_FILE,
    check_encoder_for,
    check_index_file,
    index_files_dir,
    is_index_folder,
    open_model_for,
    read_index_meta,
    relative_model,
)
from embedkit.storage.locking import locked
from embedkit.storage.versioned import holds_no_version, new_version


@dataclass(frozen=True)
class IndexReport:
    """What `build_index` did."""

    path: Path
    kind: str
    reason: str  # why this kind: auto's choice, "asked for", or the appended index's kind
    params: dict[str, Any]
    added: int
    count: int  # documents in the index afterwards
    seconds: float
    truncated: int  # added documents cut at the model's max_seq_length
    backend: str
    device: str
    appended: bool
    blank: int = 0  # blank documents of the corpus, skipped (BEIR counts them: `eval` says n + blank)
    faiss_device: str = "cpu"  # where faiss built the index: cpu or cuda:N (`embedkit.index.faiss_gpu`)
    calibrated: dict[str, Any] | None = None  # the fusion calibration this build made (`IndexMeta.fusion`)
    replaced: int = 0  # `upsert`: documents of the index that the corpus replaced
    passages: int = 0  # passages added (their vectors), where the index holds passages
    hidden_files: int = 0  # hidden files and folders of a folder of text files, left out
    binary_files: int = 0  # binary files of such a folder, skipped
    recoded_files: tuple[str, ...] = ()  # files of such a folder read from another encoding than UTF-8
    prefixes: str = "no prefixes"  # the query and passage prefixes the index embeds with


# --- building ------------------------------------------------------------------------------------


@locked("out")
def build_index(
    corpus: str | Path,
    out: str | Path,
    model: Encoder | str | Path | None = None,
    *,
    kind: str = "auto",  # auto, flat, hnsw or ivf-pq
    append: bool = False,  # add to the index in `out`
    upsert: bool = False,  # with `append`: documents whose ids the index holds replace them
    overwrite: bool = False,  # replace the index in `out`
    gpu: bool = False,  # build with faiss's GPU index on GPU 0 (saved in CPU form)
    options: CorpusOptions | None = None,  # columns, chunk and batch sizes
    device: str = "auto",  # where the model runs; cuda or cuda:N also puts faiss on that GPU
    precision: str | None = None,  # ONNX precision, likewise
    progress: bool = False,
    lexical: bool = True,  # a new index also gets a BM25 index of title + text (hybrid search)
    calibrate: bool = True,  # choose the fusion on pseudo queries (`embedkit.evaluation.calibrate`)
    fusion: dict[str, Any] | None = None,  # a recorded calibration to keep as it is, instead of one made here
    passages: PassageSettings | str | None = None,  # split documents into passages (a new index)
    query_prefix: str | None = None,  # None: the model card's (a new index) or the index's (append)
    passage_prefix: str | None = None,
) -> IndexReport:
    """Embed `corpus` and build the index folder `out`, or with `append` add to it.

    `model`: an open encoder or a model folder (None: the bundled model; with `append`, the index's
    own model). A new index needs an absent or empty `out`, or `overwrite` to replace an index. An
    append keeps the index's kind and model (a given model must have the same fingerprint, or be its
    ONNX export). Document ids must be unique: an id already present is an `InputError`, unless
    `upsert`, where the index's document of that id (every row of it) is deleted in the same new
    version (`embedkit.index.edits`: what a deletion costs per index kind).
    A new index holds a BM25 lexical index beside the vectors unless `lexical` is False; an append
    keeps whatever the index has, both sides in one step.
    `passages` ("N:OVERLAP" tokens, or `PassageSettings`) splits long documents into passages
    (`embedkit.index.passages`); `query_prefix` / `passage_prefix` are recorded and put before
    queries and documents (`embedkit.encode.prefixes`; None: what the model folder states). An
    append keeps the index's passages and prefixes (another one given is an `InputError`), and a
    `.txt` corpus appended numbers its lines on from the largest numeric id the index holds.
    """
    out = Path(out)
    options = options or CorpusOptions()
    if kind not in KINDS:
        raise InputError(f"unknown index kind {kind!r}: use {', '.join(KINDS)}")
    if upsert and not append:
        raise InputError("--upsert replaces documents of an existing index: use it with --append")
    old = read_index_meta(out) if append else None
    if old is None:
        check_new_target(out, overwrite)
    elif kind not in ("auto", old["kind"]):
        raise InputError(f"--kind {kind} differs from the index's kind {old['kind']}; an append keeps it")
    else:
        check_index_file(index_files_dir(out) / INDEX_FILE, old)  # before minutes of embedding
    placement = placement_for(device, gpu)  # faiss on a GPU: checked before minutes of embedding
    if old is not None and placement is not None and old["kind"] == "hnsw":
        raise InputError(f"faiss has no GPU HNSW index: append to this index without {placement.asked}")
    split = passage_settings(passages, old)
    # line ids go on after the index's, not from 1 again; an upsert keeps them, to meet its lines
    if old is not None and not upsert and is_line_file(corpus):
        options = replace(options, first_line_id=_largest_number_id(out))
    read = ReadStats()
    count, corpus_fingerprint = count_and_fingerprint(corpus, options, read)
    if old is not None and not hasattr(model, "encode"):
        encoder = open_model_for(old, model, device, precision)
    else:
        encoder = as_encoder(model, device, precision)
    if old is not None:
        check_encoder_for(old, encoder, f"the index {out}")
    if old is None:
        prefixes = resolve_prefixes(encoder.path, query_prefix, passage_prefix)
    else:
        prefixes = recorded_prefixes(old)
        check_recorded(prefixes, query_prefix, passage_prefix, "index")
    splitter = PassageSplitter(encoder.path, split) if split is not None else None
    vectors = count if splitter is None else sum(1 for _ in splitter.passages(read_corpus(corpus, options)))
    if old is None:
        chosen, reason = choose_kind(kind, vectors, encoder.dim, gpu=placement is not None)
        params = index_params(chosen, vectors, encoder.dim)
    else:
        chosen, reason, params = old["kind"], "the index's kind", dict(old["params"])
    truncated_before, replaced = encoder.truncated, 0
    start = time.perf_counter()
    with new_version(out) as tmp:
        if old is None:
            index = new_faiss_index(chosen, encoder.dim, params)
            store = DocStore.create(tmp / DOCS_FILE, passages=split is not None)
            if lexical:
                store.enable_lexical()
        else:
            index, store = read_faiss_copy(out, tmp, old), copy_store(out, tmp, old)
            if upsert:
                index, fingerprint, replaced = _replaced(index, store, old, corpus, options)
                old = {**old, "corpus_fingerprint": fingerprint}
        work = placement.to_gpu(index, chosen) if placement else index
        try:
            units = splitter.passages(read_corpus(corpus, options)) if splitter is not None else None
            _fill(work, store, encoder, corpus, vectors, options, tmp, progress, units, prefixes.passage)
            store.commit()
            settings = store.lexical.settings if store.lexical is not None else None
            masked = len(store.masked_rows())
            documents = store.document_count() if split is not None else None
        finally:
            store.close()
        index = placement.to_cpu(work) if placement else work
        # an index of passages is not calibrated (its pseudo queries would score passages, not the
        # documents search ranks): it fuses with the default (docs/hybrid.md)
        due = calibrate and fusion is None and split is None
        calibrated = _calibrated(old, tmp, index, encoder, settings, prefixes) if due else None
        fusion = calibrated or fusion or (old.get("fusion") if old else None)
        stamp = now()
        meta = IndexMeta(
            model=str(recorded_model_path(encoder)),
            model_relative=relative_model(recorded_model_path(encoder), out),
            model_fingerprint=encoder.fingerprint,
            model_backend=encoder.backend,
            dim=encoder.dim,
            max_seq_length=encoder.max_seq_length,
            kind=chosen,
            kind_reason=old["kind_reason"] if old else reason,
            params=params,
            lexical=store.lexical.settings.to_json() if store.lexical is not None else None,
            count=int(index.ntotal),  # vectors: documents, and (hnsw) deleted ones masked
            corpus_fingerprint=combined(old.get("corpus_fingerprint"), corpus_fingerprint)
            if old
            else corpus_fingerprint,
            index_bytes=write_faiss(index, tmp / INDEX_FILE),
            created=old["created"] if old else stamp,
            updated=stamp,
            index_id=old.get("index_id", "") if old else new_index_id(),
            sources=[
                *(old.get("sources", []) if old else []),
                _source(corpus, count, replaced if upsert else None),
            ],
            fusion=fusion,
            passages=split.to_json() if split is not None else None,
            documents=documents,
            query_prefix=prefixes.query,
            passage_prefix=prefixes.passage,
        )
        write_json_atomic(tmp / META_FILE, meta.to_json())
    seconds, truncated = time.perf_counter() - start, encoder.truncated - truncated_before
    return IndexReport(
        out,
        chosen,
        reason,
        params,
        count,
        meta.count - masked if documents is None else documents,
        seconds,
        truncated,
        encoder.backend,
        str(encoder.device),
        appended=old is not None,
        blank=read.blank,
        faiss_device=placement.name if placement else "cpu",
        calibrated=calibrated,
        replaced=replaced,
        passages=vectors if split is not None else 0,
        hidden_files=read.hidden,
        binary_files=read.binary,
        recoded_files=tuple(read.recoded),
        prefixes=prefixes.describe(),
    )


def _calibrated(
    old: dict[str, Any] | None,
    tmp: Path,
    index,
    encoder: Encoder,
    settings: LexicalSettings | None,
    prefixes: Prefixes,
) -> dict[str, Any] | None:
    """A new calibration (`embedkit.evaluation.calibrate`) where one is due: a new index, or one grown
    by half since its last; None where none is due or there is no lexical side to fuse."""
    from embedkit.evaluation.calibrate import calibrate_folder
    from embedkit.index.calibration import needs_calibration

    if settings is None or not needs_calibration(old or {}, int(index.ntotal)):
        return None
    return calibrate_folder(tmp, index, encoder, settings, prefixes=prefixes).to_json()


def _source(corpus: str | Path, added: int, replaced: int | None) -> dict[str, Any]:
    """The metadata's record of one build or append (`sources`)."""
    return {"corpus": str(corpus), "added": added, **({"replaced": replaced} if replaced is not None else {})}


def _replaced(index, store: DocStore, old: dict[str, Any], corpus: str | Path, options: CorpusOptions):
    """`--upsert`: the documents of the index whose ids `corpus` holds, removed (one more read of it)."""
    from embedkit.index.edits import remove_documents
    from embedkit.jobs.streaming import read_corpus

    ids = [doc.id for doc in read_corpus(corpus, options)]
    found = store.rows_by_id(ids)
    rows = np.asarray(sorted(row for held in found.values() for row in held), dtype=np.int64)
    if not len(rows):
        return index, old.get("corpus_fingerprint"), 0
    index, fingerprint = remove_documents(index, store, old["kind"], rows, old.get("corpus_fingerprint"))
    return index, fingerprint, len(found)


def _largest_number_id(out: Path) -> int:
    store = DocStore.open(index_files_dir(out) / DOCS_FILE)
    try:
        return store.largest_number_id()
    finally:
        store.close()


def check_new_target(out: Path, overwrite: bool) -> None:
    """A new index goes to an absent or empty folder, or replaces an index with `overwrite`."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; give a folder for the index")
    if not out.is_dir() or holds_no_version(out):
        return
    if not is_index_folder(out):
        raise InputError(f"--out {out} is a folder that is neither empty nor an index; choose another")
    if not overwrite:
        raise InputError(
            f"{out} already holds an index: use --append to add to it, or --overwrite to replace it"
        )


def _fill(
    index,
    store: DocStore,
    encoder: Encoder,
    corpus: str | Path,
    count: int,
    options: CorpusOptions,
    tmp: Path,
    progress: bool,
    units: Iterator[Passage] | None = None,
    prefix: str = "",
) -> None:
    """Embed the corpus (or `units`, its passages) into `store` and `index` (a CPU or GPU index).

    An untrained IVF-PQ index cannot take vectors before it is trained on a sample of them, so its
    vectors go to a memory map in the build folder first.
    """
    first_row = store.next_row()  # rows are permanent: after deletions they continue past the gaps
    if not store.has_deleted() and first_row != index.ntotal:
        raise InputError(f"{store.path} holds {first_row} documents but the index {index.ntotal} vectors")
    buffer_path = tmp / "vectors.tmp.npy"
    buffer = None
    if not index.is_trained:
        buffer = npy_for_writing(buffer_path, (count, index.d))  # reserved: a full disk is no SIGBUS

    def write(offset: int, documents: list[Document], vectors: np.ndarray) -> None:
        store.add(first_row + offset, documents)
        if buffer is None:
            add_rows(index, vectors, first_row + offset)
        else:
            buffer[offset : offset + len(documents)] = vectors

    embed_corpus(
        encoder,
        corpus,
        write,
        expected=count,
        options=options,
        normalize=True,
        progress=progress,
        description="indexing",
        documents=units,
        prefix=prefix,
    )
    if buffer is not None:
        train_ivf(index, buffer, options.chunk_size)
        buffer_path.unlink()  # the map stays valid until it is freed (POSIX)
