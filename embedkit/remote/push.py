"""Sending an index (or the part files of `embed --shard`) to a search server: `embedkit push`.

Vectors are the ones the index holds (`LocalStore.vectors_of_rows`: exact for flat and HNSW,
decoded codes for IVF-PQ) or the parts hold (normalised as `index --from-vectors` does); nothing
is embedded again. Documents go under their index row, in batches, upserted: a push killed half
way is finished by pushing again (`--append` sends only the rows the collection lacks, checked a
batch at a time). Rows are permanent keys (`embedkit.index.docstore`): rows the collection holds
that the index no longer does (documents deleted, or replaced by `--upsert` under a new row) are
deleted there, so a push, with `--append` or not, carries deletions and updates. Before anything
is written the target is checked: same model (fingerprint), same dimension, no row beyond this
source's (else it holds another corpus). The push record
(`PushRecord`) is written when the collection is created (count 0) and again when the push is
complete, so `count` is the rows of the last complete push. It carries the index's calibrated
fusion (`fusion`), so a search of the collection defaults to what the index's own search runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

import numpy as np

from embedkit.encode.identity import check_same_model
from embedkit.errors import InputError, RunFailure
from embedkit.index.layout import check_not_in_index
from embedkit.index.meta import now
from embedkit.progress import ProgressBar
from embedkit.remote.base import PushRecord, RemoteCollection, RemoteTarget, open_collection
from embedkit.remote.milvus import ANALYZER, BM25

PUSH_BATCH = 1000  # documents per upsert request: ~2 MB at 384 dims, far below Milvus's 64 MiB cap

Batch = tuple[list[int], list, np.ndarray]  # rows, documents, vectors [len(rows), dim]


@dataclass(frozen=True)
class PushReport:
    target: RemoteTarget
    total: int  # rows the source holds (and the collection holds after the push)
    sent: int  # rows sent by this push (fewer than total with --append)
    seconds: float


def push_index(
    index_dir: str | Path,
    target: RemoteTarget,
    *,
    append: bool = False,
    dense_index: str = "FLAT",
    batch_size: int = PUSH_BATCH,
    progress: bool = False,
) -> PushReport:
    """Push the index folder `index_dir` into `target`'s collection (created if absent)."""
    from embedkit.index.local_store import LocalStore

    index = LocalStore.open(index_dir)
    try:
        meta = index.meta
        if index.passages or meta.get("query_prefix") or meta.get("passage_prefix"):
            raise InputError(
                f"{index_dir} holds passages or embeds with prefixes, which a pushed collection does not "
                "record yet: push an index of whole documents built without prefixes"
            )
        record = _index_record(index, index_dir)

        def batches(wanted: list[int]) -> Iterator[Batch]:
            found = index.docs.by_rows(wanted)
            vectors = index.vectors_of_rows(wanted)
            if vectors is None:
                raise InputError(
                    f"{index_dir}: its vectors cannot be read back; push an index saved on the CPU"
                )
            yield wanted, found, vectors

        def prefix(count: int) -> str:
            return _fingerprint(
                doc
                for first in range(0, count, batch_size)
                for doc in index.docs.by_rows(list(range(first, min(count, first + batch_size))))
                if doc is not None  # a deleted row
            )

        stop = index.docs.next_row()
        rows = index.docs.rows_between(0, stop)
        return _push(
            record, target, batches, append, dense_index, batch_size, progress,
            rows=rows, stop=stop, prefix=prefix,
        )
    finally:
        index.close()


def _index_record(index, index_dir: str | Path) -> PushRecord:
    """The push record of an open local index (`LocalStore`): its model, size, identity, fusion."""
    meta = index.meta
    return PushRecord(
        model=meta["model"],
        model_fingerprint=meta["model_fingerprint"],
        model_backend=meta.get("model_backend", "torch"),
        max_seq_length=meta.get("max_seq_length"),
        dim=index.dim,
        model_dim=meta.get("model_dim"),  # queries are cut to `dim` where the index keeps fewer
        count=len(index),
        corpus_fingerprint=meta.get("corpus_fingerprint"),
        index_id=meta.get("index_id", ""),
        index_created=meta.get("created", ""),
        index_updated=meta.get("updated", ""),
        index_format=meta.get("version"),
        source=str(index_dir),
        lexical={"analyzer": ANALYZER, **BM25},
        metadata_fields={name: sorted(types) for name, types in index.docs.filters.fields().items()},
        fusion=meta.get("fusion"),  # its search defaults travel with it (`embedkit.search.request`)
    )


def push_vectors(
    parts_dir: str | Path,
    corpus: str | Path,
    target: RemoteTarget,
    *,
    model: str | Path | None = None,
    append: bool = False,
    dense_index: str = "FLAT",
    batch_size: int = PUSH_BATCH,
    progress: bool = False,
    options=None,  # embedkit.jobs.streaming.CorpusOptions: how to read the corpus
) -> PushReport:
    """Push the part files in `parts_dir` (of `embed --shard`) with the documents of `corpus`.

    The parts and the corpus are checked as `index --from-vectors` checks them (complete set, one
    model, the corpus they were embedded from, in order) before the server is contacted.
    """
    from embedkit.data.fingerprint import combined
    from embedkit.encode.default_onnx import recorded_model_path
    from embedkit.jobs.parts import check_corpus, model_of_parts, normalized, read_parts
    from embedkit.jobs.streaming import CorpusOptions, read_corpus

    options = options or CorpusOptions()
    parts = read_parts(parts_dir)
    first = parts[0].info
    spec = model_of_parts(parts, model)
    check_corpus(parts, corpus, options, progress)
    record = PushRecord(
        model=str(recorded_model_path(spec)),
        model_fingerprint=first.model_fingerprint,
        model_backend=first.model_backend,
        max_seq_length=first.max_seq_length,
        dim=first.dim,
        count=first.total,
        corpus_fingerprint=combined(*(part.info.corpus_fingerprint for part in parts)) or None,
        source=str(parts_dir),
        lexical={"analyzer": ANALYZER, **BM25},
    )

    def batches(wanted: list[int]) -> Iterator[Batch]:
        # the corpus and the parts are read in order once; `wanted` (ascending) picks rows of them
        documents = read_corpus(corpus, options)
        keep = set(wanted)
        for part in parts:
            vectors, start = part.vectors(), part.info.start
            for offset in range(0, part.info.count, batch_size):
                chunk = list(islice(documents, min(batch_size, part.info.count - offset)))
                rows = [start + offset + i for i in range(len(chunk)) if start + offset + i in keep]
                if rows:
                    local = np.asarray(rows) - start
                    yield rows, [chunk[r - start - offset] for r in rows], normalized(vectors[local], part)
            del vectors

    def prefix(count: int) -> str:
        return _fingerprint(islice(read_corpus(corpus, options), count))

    return _push(
        record, target, batches, append, dense_index, batch_size, progress, stream=True, prefix=prefix
    )


def _push(
    record: PushRecord,
    target: RemoteTarget,
    batches,  # (wanted rows) -> Iterator[Batch]
    append: bool,
    dense_index: str,
    batch_size: int,
    progress: bool,
    stream: bool = False,  # `batches` reads its whole source once (parts) rather than per call
    rows: list[int] | None = None,  # the source's rows, ascending (default 0..count-1)
    stop: int | None = None,  # one past the source's last row ever (deleted ones too)
    prefix: Callable[[int], str] | None = None,  # the corpus fingerprint of the source's first rows
) -> PushReport:
    if batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    if target.is_local_file:  # a Milvus Lite file is an output: never where an index deletes
        check_not_in_index(target.uri)
    start = time.perf_counter()
    collection = open_collection(target, create=True)
    try:
        stamp = now()
        record = replace(record, pushed=stamp)
        rows = list(range(record.count)) if rows is None else rows
        stop = record.count if stop is None else stop
        existed = collection.exists()
        if existed:
            held = _check_target(collection, record)
            if append and prefix is not None:
                _check_same_source(target, held, record, prefix)
        else:
            collection.create(record.dim, replace(record, count=0), dense_index)
        sent = 0
        with ProgressBar(record.count, "pushing", enabled=progress, rate_unit="docs/s") as bar:
            wanted_all, stale = _plan(collection, rows, stop, append and existed, existed, bar)
            collection.delete(stale)  # deleted or replaced documents: before their rows count
            if stream:
                for rows, documents, vectors in batches(wanted_all):
                    collection.upsert(rows, documents, vectors)
                    sent += len(rows)
                    bar.advance(len(rows))
            else:
                for first in range(0, len(wanted_all), batch_size):
                    for rows, documents, vectors in batches(wanted_all[first : first + batch_size]):
                        collection.upsert(rows, documents, vectors)
                        sent += len(rows)
                        bar.advance(len(rows))
        collection.flush()
        held_now = collection.count()
        if held_now != record.count:
            raise RunFailure(
                f"{target} holds {held_now:,} rows after the push, not {record.count:,}: push again"
            )
        collection.write_record(record)
    finally:
        collection.close()
    return PushReport(target, record.count, sent, time.perf_counter() - start)


def _plan(
    collection: RemoteCollection, rows: list[int], stop: int, append: bool, existed: bool, bar: ProgressBar
) -> tuple[list[int], list[int]]:
    """The rows to send (all, or with `append` those the collection lacks: the others count as done)
    and the rows to delete there (held there, no longer in the source), read a window at a time.

    A collection holding rows at or beyond `stop` holds another corpus: an `InputError`."""
    if not existed:
        return list(rows), []
    wanted: list[int] = []
    stale: list[int] = []
    seen, position = 0, 0
    window = max(1, PUSH_BATCH * 10)
    for first in range(0, stop, window):
        last = min(stop, first + window)
        present = collection.rows_present(first, last)
        end = position
        while end < len(rows) and rows[end] < last:
            end += 1
        live = rows[position:end]
        position, seen = end, seen + len(present)
        wanted += [row for row in live if row not in present] if append else live
        stale += sorted(present.difference(live))
    if collection.count() > seen:
        raise InputError(
            f"{collection.target} holds rows this source never had: it holds another corpus; "
            "use another --collection"
        )
    bar.advance(len(rows) - len(wanted))
    return wanted, stale


def _check_target(collection: RemoteCollection, record: PushRecord) -> PushRecord:
    """An existing collection must hold this model's vectors and no rows beyond this source's."""
    target = collection.target
    dim = collection.dim()
    if dim != record.dim:
        raise InputError(
            f"{target} holds {dim}-d vectors; this source has {record.dim}-d: use another --collection"
        )
    held = collection.read_record()
    if held is None:
        raise InputError(f"{target} was not made by embedkit push (no push record): use another --collection")
    try:
        check_same_model(
            held.model_fingerprint, held.model, record.model_fingerprint, record.model, str(target)
        )
    except InputError as exc:
        raise InputError(f"{exc}; or push to another --collection") from None
    return held  # rows beyond any the source ever had are refused by `_plan`


def _check_same_source(
    target: RemoteTarget, held: PushRecord, record: PushRecord, prefix: Callable[[int], str]
) -> None:
    """`--append` sends only the rows a collection lacks, so the rows it has must be this source's:
    the same index (its `index_id`, drawn when it was created: its appends, deletions and updates
    since are carried by `_plan`), or, where no identity was recorded, a corpus whose first
    `held.count` documents are the ones the last complete push recorded (a source that grew passes;
    another one never).

    Indexes of an earlier embedkit have no `index_id`; theirs is told by `created`, which has a
    resolution of seconds, so two of them built in the same second pass as one.
    """
    fix = "push without --append to replace its rows, or use another --collection"
    if held.index_id and record.index_id:
        if held.index_id != record.index_id:
            raise InputError(
                f"{target} holds another index ({held.source}, created {held.index_created}) than "
                f"{record.source} (created {record.index_created}): {fix}"
            )
        return
    if held.index_created and record.index_created and not (held.index_id or record.index_id):
        if held.index_created != record.index_created:
            raise InputError(
                f"{target} holds another index ({held.source}, created {held.index_created}) than "
                f"{record.source} (created {record.index_created}): {fix}"
            )
        return
    if held.corpus_fingerprint is not None and held.corpus_fingerprint == record.corpus_fingerprint:
        return  # the same source: a push killed half way is finished
    if held.corpus_fingerprint is not None and held.count and prefix(held.count) == held.corpus_fingerprint:
        return  # this source's first rows are the ones pushed: it grew since
    raise InputError(
        f"{target} holds rows of another corpus than {record.source} (corpus fingerprint "
        f"{held.corpus_fingerprint or 'unrecorded'} over its {held.count:,} rows): {fix}"
    )


def _fingerprint(documents) -> str:
    from embedkit.data.fingerprint import CorpusFingerprint

    fingerprint = CorpusFingerprint()
    fingerprint.add(documents)
    return fingerprint.hex
