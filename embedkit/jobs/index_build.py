"""Building an index folder from a corpus, or appending a corpus to one (`embedkit index`).

`build_index` is four steps, each a function below: `prepare` (every check that can fail before
minutes of embedding, the model, the index appended to), `fill` (the corpus read once: documents,
BM25 and vectors written, an upsert's replaced documents removed, the count and fingerprint
kept as it streams), `calibrated` (the fusion chosen on pseudo queries from the new documents,
`embedkit.evaluation.fusion_calibration`) and `record` (the metadata); its settings, and their
checks, are `embedkit.jobs.index_options`. Every write builds a complete version inside INDEX_DIR
and makes it live in one rename (`embedkit.storage.versioned`); an append works on a copy. A
crash at any point leaves the previous index intact, and one writer at a time holds the index
(`embedkit.storage.locking`).

Kinds: `flat` (exact), `hnsw` (graph, approximate, fast), `ivf-pq` (compressed, for corpora whose
vectors do not fit in memory). `auto` picks flat under `AUTO_FLAT_MAX` vectors, HNSW above, and
IVF-PQ when an HNSW index would take more than half of this machine's memory (or on the GPU,
where faiss has no HNSW). A new index learns its size only as the corpus streams, so its vectors
go to a file in the build folder first and into the chosen FAISS index once all are embedded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.data.corpus import ReadStats, is_line_file
from embedkit.data.textfolder import check_folder, is_documents
from embedkit.encode.default_onnx import recorded_model_path
from embedkit.encode.prefixes import Prefixes, check_recorded, recorded_prefixes, resolve_prefixes
from embedkit.encode.truncated_encoder import TruncatedEncoder, keep_dimensions
from embedkit.encode.truncation import CutDocuments
from embedkit.errors import InputError
from embedkit.evaluation.fusion_calibration import calibrate_version
from embedkit.evaluation.fusion_rule import needs_calibration
from embedkit.index.build_report import IndexReport
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.folder import (
    DOCS_FILE,
    INDEX_FILE,
    META_FILE,
    check_encoder_for,
    check_index_file,
    check_new_target,
    fit_encoder,
    index_files_dir,
    open_model_for,
    read_index_meta,
    relative_model,
)
from embedkit.index.lexical_rebuild import fill_lexical
from embedkit.index.meta import IndexMeta, new_index_id, now
from embedkit.index.passages import PassageSettings, PassageSplitter, fitting_passages, passage_settings
from embedkit.index.version_copy import copy_store, read_faiss_copy, write_faiss
from embedkit.jobs.index_changes import SyncTracker, Tally, Unchanged, sync_into_index, unchanged_report
from embedkit.jobs.index_options import IndexOptions, check_options, check_vector_options
from embedkit.jobs.index_vectors import Target, VectorWriter
from embedkit.jobs.streaming import Corpus, as_encoder, chunked, corpus_name, embed_chunk, read_corpus
from embedkit.progress import ProgressBar
from embedkit.search.request import Calibration
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.locking import locked
from embedkit.storage.versioned import new_version

if TYPE_CHECKING:
    from embedkit.encode.protocol import Encoder


@dataclass
class Plan:
    """What `prepare` settled before anything is embedded."""

    corpus: Corpus
    out: Path
    options: IndexOptions
    old: dict[str, Any] | None  # the appended index's metadata (None: a new index)
    encoder: Encoder
    prefixes: Prefixes
    split: PassageSettings | None
    placement: Any  # faiss on a GPU (`embedkit.index.faiss_gpu`), or None


@dataclass
class Filled:
    """What `fill` wrote: the index (CPU), its store's facts, and what the corpus held."""

    index: Any
    kind: str
    reason: str  # why this kind: auto's choice, "asked for", or the appended index's kind
    params: dict[str, Any]
    documents: int  # documents read from the corpus
    vectors: int  # vectors added (passages, in an index of passages)
    fingerprint: str | None  # the index's corpus fingerprint afterwards (None: unknown)
    replaced: int  # `upsert`: documents of the index the corpus replaced
    lexical: Any  # the lexical side's settings (None: no side)
    masked: int  # vectors of deleted documents still in the FAISS file
    held: int | None  # documents held, where they differ from the vectors (passages)
    read: ReadStats
    cut: CutDocuments  # the documents the model cut at its maximum length
    kept: int = 0  # `sync`: documents of the index the corpus gives unchanged
    deleted: int = 0  # `sync`: documents of the index the corpus no longer gives


@locked("out")
def build_index(
    corpus: Corpus,
    out: str | Path,
    model: Encoder | str | Path | None = None,
    options: IndexOptions | None = None,
    *,
    progress: bool = False,
    fusion: Calibration | None = None,  # a recorded calibration to keep as it is, instead of one made here
) -> IndexReport:
    """Embed `corpus` (a file or folder, or `Document`s) and build the index folder `out`, or with
    `options.append` add to it.

    `model`: an open encoder or a model folder (None: the bundled model; with `append`, the index's
    own model). A new index needs an absent or empty `out`, or `overwrite` to replace an index. An
    append keeps the index's kind, model, passages and prefixes (another one given is an
    `InputError`), and the BM25 side it has. Document ids must be unique: an id already present is
    an `InputError`, unless `upsert`, where the index's document of that id (every row of it) is
    deleted in the same new version (`embedkit.index.edits`). A `.txt` corpus appended numbers
    its lines on from the largest numeric id the index holds. `sync`: only what changed is
    embedded, and what the corpus no longer gives deleted (`embedkit.jobs.index_changes`); where
    nothing changed, no version is written.
    """
    plan = prepare(corpus, Path(out), model, options or IndexOptions())
    start, truncated = time.perf_counter(), plan.encoder.truncated
    try:
        with new_version(plan.out) as tmp:
            filled = fill(plan, tmp, progress)
            truncated = plan.encoder.truncated - truncated  # the corpus's texts, not the calibration's
            advice = None  # the passages that would have kept every word
            if truncated and plan.split is None:
                with DocStore.open(tmp / DOCS_FILE) as docs:
                    advice = fitting_passages(plan.encoder.path, docs.titles())
            calibration = calibrated(plan, filled, tmp) if fusion is None else None
            meta = record(plan, filled, tmp, calibration or fusion)
    except Unchanged as same:  # the staging folder is gone, the live version untouched
        seconds = time.perf_counter() - start
        return unchanged_report(
            plan.out, plan.old or {}, plan.encoder, plan.prefixes.describe(), same, seconds
        )
    return IndexReport(
        plan.out,
        filled.kind,
        filled.reason,
        filled.params,
        filled.documents,
        meta.count - filled.masked if filled.held is None else filled.held,
        time.perf_counter() - start,
        truncated,
        plan.encoder.backend,
        str(plan.encoder.device),
        appended=plan.old is not None,
        blank=filled.read.blank,
        faiss_device=plan.placement.name if plan.placement else "cpu",
        calibrated=calibration,
        replaced=filled.replaced,
        passages=filled.vectors if plan.split is not None else 0,
        hidden_files=filled.read.hidden,
        binary_files=filled.read.binary,
        recoded_files=tuple(filled.read.recoded),
        skipped_files=tuple(filled.read.skipped),
        prefixes=plan.prefixes.describe(),
        passage_advice=advice.describe() if advice is not None else None,
        truncated_ids=tuple(filled.cut.names),
        truncated_documents=filled.cut.count,
        kept=filled.kept,
        deleted=filled.deleted,
        synced=plan.options.sync,
    )


def prepare(corpus: Corpus, out: Path, model: Encoder | str | Path | None, options: IndexOptions) -> Plan:
    """Every check that can fail before the corpus is read, and the model opened (checked against
    the index appended to)."""
    check_options(options)
    if options.sync:
        held = sync_into_index(out, options.append, options.overwrite)
        options = replace(options, append=held, upsert=held)
    old = read_index_meta(out) if options.append else None
    if old is None:
        check_new_target(out, options.overwrite)
    elif options.kind not in ("auto", old["kind"]):
        raise InputError(
            f"--kind {options.kind} differs from the index's kind {old['kind']}; an append keeps it"
        )
    else:
        check_index_file(index_files_dir(out) / INDEX_FILE, old)
    placement = placement_for(options.runtime)
    if old is not None and placement is not None and old["kind"] == "hnsw":
        raise InputError(f"faiss has no GPU HNSW index: append to this index without {placement.asked}")
    split = passage_settings(options.passages, old)
    if isinstance(corpus, (str, Path)) and is_documents(Path(corpus)):  # checked before the model opens
        check_folder(Path(corpus))
    # line ids go on after the index's, not from 1 again; an upsert keeps them, to meet its lines
    if old is not None and not options.upsert and isinstance(corpus, (str, Path)) and is_line_file(corpus):
        options = replace(options, corpus=replace(options.corpus, first_line_id=_largest_number_id(out)))
    check_vector_options(options, old)
    if old is not None and (model is None or isinstance(model, (str, Path))):
        encoder = open_model_for(old, model, options.runtime)
    else:
        encoder = as_encoder(model, options.runtime)
    if old is None:
        encoder = keep_dimensions(encoder, options.dim)
        prefixes = resolve_prefixes(encoder.path, options.query_prefix, options.passage_prefix)
    else:
        check_encoder_for(old, encoder, f"the index {out}")
        encoder = fit_encoder(old, encoder)
        prefixes = recorded_prefixes(old)
        check_recorded(prefixes, options.query_prefix, options.passage_prefix, "index")
    return Plan(corpus, out, options, old, encoder, prefixes, split, placement)


def _largest_number_id(out: Path) -> int:
    with DocStore.open(index_files_dir(out) / DOCS_FILE) as store:
        return store.largest_number_id()


def fill(plan: Plan, tmp: Path, progress: bool) -> Filled:
    """Read the corpus once: each chunk's documents (or passages) stored with their BM25 entries
    and embedded, an upsert's replaced documents removed first; then the vectors into FAISS."""
    store, index = _opened(plan, tmp)
    try:
        writer = VectorWriter(
            index,
            tmp,
            store.next_row(),
            plan.encoder.dim,
            Target(plan.old, plan.options.kind, plan.options.quantize, plan.options.corpus.chunk_size),
            plan.placement,
            on_gpu=_appends_on_gpu(plan),
        )
        if not store.deletions.any() and writer.first_row != (index.ntotal if index is not None else 0):
            raise InputError(
                f"{store.path} holds {writer.first_row} documents but the index {index.ntotal} vectors"
            )
        tally = Tally(plan.old)
        sync = SyncTracker(store) if plan.options.sync and plan.old is not None else None
        splitter = PassageSplitter(plan.encoder.path, plan.split) if plan.split else None
        size = plan.options.corpus.chunk_size
        pending: list = []  # documents (or passages) read, not yet embedded: a chunk is `size` of them
        with ProgressBar(None, "indexing", enabled=progress, rate_unit="sent/s", transient=True) as bar:
            for documents in chunked(read_corpus(plan.corpus, plan.options.corpus, tally.read), size):
                if sync is not None:  # only the new and the changed are embedded
                    documents = sync.changed(documents)
                tally.add(documents)
                pending += splitter.split(documents) if splitter is not None else documents
                while len(pending) >= size:
                    _embed(plan, store, writer, tally, pending[:size], bar)
                    pending = pending[size:]
            if pending:
                _embed(plan, store, writer, tally, pending, bar)
        if sync is not None:
            sync.finish(tally, writer, corpus_name(plan.corpus))
        elif not tally.count:
            raise InputError(f"empty corpus: {corpus_name(plan.corpus)} holds no documents")
        kind, reason, params, index = writer.finish(tally.count)
        store.commit()
        lexical = store.lexical.settings if store.lexical is not None else None
        masked, held = len(store.deletions.masked_rows()), store.document_count() if plan.split else None
    finally:
        store.close()
    return Filled(
        index, kind, reason, params, tally.count, writer.added, tally.fingerprint(),
        tally.replaced, lexical, masked, held, tally.read, tally.cut,
        sync.kept if sync else 0, sync.deleted if sync else 0,
    )  # fmt: skip


def _embed(
    plan: Plan, store: DocStore, writer: VectorWriter, tally: Tally, chunk: list, bar: ProgressBar
) -> None:
    """One chunk: an upsert's replaced documents removed, then its texts embedded (with the
    passage prefix) and stored, vectors and documents at the same rows."""
    if plan.options.upsert:
        tally.replace(store, writer, chunk)
    vectors = embed_chunk(plan.encoder, chunk, plan.options.corpus, True, plan.prefixes.passage)
    tally.cut.note(plan.encoder, chunk)
    store.add(writer.next_row, chunk)
    writer.write(vectors)
    bar.advance(len(chunk))


def _opened(plan: Plan, tmp: Path) -> tuple[DocStore, Any]:
    """The version's document store, and its FAISS index for an append (a new one is made later)."""
    if plan.old is None:
        store = DocStore.create(tmp / DOCS_FILE, passages=plan.split is not None)
        if plan.options.lexical:
            fill_lexical(store)
        return store, None
    index, store = read_faiss_copy(plan.out, tmp, plan.old), copy_store(plan.out, tmp, plan.old)
    return store, (plan.placement.to_gpu(index, plan.old["kind"]) if _appends_on_gpu(plan) else index)


def _appends_on_gpu(plan: Plan) -> bool:
    """An append adds on the GPU asked for, but an upsert removes vectors, which faiss's GPU
    indexes cannot: it stays on the CPU."""
    return plan.placement is not None and not plan.options.upsert


def calibrated(plan: Plan, filled: Filled, tmp: Path) -> Calibration | None:
    """A new calibration where one is due: a new index, or one grown by half since its last; None
    where none is due, or there is no lexical side to fuse. An index of passages is calibrated on
    documents ranked by their best passage, as search ranks them."""
    if not plan.options.calibrate or filled.lexical is None:
        return None
    if not needs_calibration(plan.old or {}, int(filled.index.ntotal)):
        return None
    meta = {"dim": plan.encoder.dim, "kind": filled.kind, "params": filled.params}
    meta |= {"query_prefix": plan.prefixes.query, "passage_prefix": plan.prefixes.passage}
    meta |= {"passages": plan.split.to_json() if plan.split is not None else None}
    return calibrate_version(tmp, filled.index, meta, plan.encoder, filled.lexical)


def record(plan: Plan, filled: Filled, tmp: Path, fusion: Calibration | None) -> IndexMeta:
    """The FAISS file and the metadata of the new version."""
    old, encoder, stamp = plan.old or {}, plan.encoder, now()
    source = {"corpus": corpus_name(plan.corpus), "added": filled.documents}
    if plan.options.upsert:
        source["replaced"] = filled.replaced
    if plan.options.sync:
        source |= {"kept": filled.kept, "deleted": filled.deleted}
    meta = IndexMeta(
        model=str(recorded_model_path(encoder)),
        model_relative=relative_model(recorded_model_path(encoder), plan.out),
        model_fingerprint=encoder.fingerprint,
        model_backend=encoder.backend,
        dim=encoder.dim,
        model_dim=encoder.encoder.dim if isinstance(encoder, TruncatedEncoder) else None,
        max_seq_length=encoder.max_seq_length,
        kind=filled.kind,
        kind_reason=old.get("kind_reason", filled.reason),
        params=filled.params,
        lexical=filled.lexical.to_json() if filled.lexical is not None else None,
        count=int(filled.index.ntotal),  # vectors: documents, and (hnsw) deleted ones masked
        corpus_fingerprint=filled.fingerprint,
        index_bytes=write_faiss(filled.index, tmp / INDEX_FILE),
        created=old.get("created", stamp),
        updated=stamp,
        index_id=old.get("index_id", "") if old else new_index_id(),
        sources=[*old.get("sources", []), source],
        fusion=fusion.to_json() if fusion is not None else old.get("fusion"),
        passages=plan.split.to_json() if plan.split is not None else None,
        documents=filled.held,
        query_prefix=plan.prefixes.query,
        passage_prefix=plan.prefixes.passage,
    )
    write_json_atomic(tmp / META_FILE, meta.to_json())
    return meta
