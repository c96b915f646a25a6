"""Sending an index (or the part files of `embed --shard`) to a search server: `embedkit push`.

Vectors are the ones the index holds (`SearchIndex.vectors_of_rows`: exact for flat and HNSW,
decoded codes for IVF-PQ) or the parts hold (normalised as `index --from-vectors` does); nothing
is embedded again. Documents go under their index row, in batches, upserted: a push killed half
way is finished by pushing again (`--append` sends only the rows the collection lacks, checked a
batch at a time). Before anything is written the target is checked: same model (fingerprint),
same dimension, no more rows than this source has (else it holds another corpus). The push record
(`PushRecord`) is written when the collection is created (count 0) and again when the push is
complete, so `count` is the rows of the last complete push.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path

import numpy as np

from embedkit.errors import InputError, RunFailure
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
    from embedkit.index.search import SearchIndex

    with SearchIndex.load(index_dir) as index:
        meta = index.meta
        if index.passages or meta.get("query_prefix") or meta.get("passage_prefix"):
            raise InputError(
                f"{index_dir} holds passages or embeds with prefixes, which a pushed collection does not "
                "record yet: push an index of whole documents built without prefixes"
            )
        record = PushRecord(
            model=meta["model"],
            model_fingerprint=meta["model_fingerprint"],
            model_backend=meta.get("model_backend", "torch"),
            max_seq_length=meta.get("max_seq_length"),
            dim=index.dim,
            count=len(index),
            corpus_fingerprint=meta.get("corpus_fingerprint"),
            index_created=meta.get("created", ""),
            index_updated=meta.get("updated", ""),
            index_format=meta.get("version"),
            source=str(index_dir),
            lexical={"analyzer": ANALYZER, **BM25},
        )

        def batches(wanted: list[int]) -> Iterator[Batch]:
            found = index.store.by_rows(wanted)
            yield wanted, found, index.vectors_of_rows(wanted)

        return _push(record, target, batches, append, dense_index, batch_size, progress)


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
    from embedkit.index.from_vectors import _check_corpus, _model_for, _normalized
    from embedkit.jobs.parts import read_parts
    from embedkit.jobs.streaming import CorpusOptions, read_corpus

    options = options or CorpusOptions()
    parts = read_parts(parts_dir)
    first = parts[0].info
    spec = _model_for(parts, model)
    _check_corpus(parts, corpus, options, progress)
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
                    yield rows, [chunk[r - start - offset] for r in rows], _normalized(vectors[local], part)
            del vectors

    return _push(record, target, batches, append, dense_index, batch_size, progress, stream=True)


def _push(
    record: PushRecord,
    target: RemoteTarget,
    batches,  # (wanted rows) -> Iterator[Batch]
    append: bool,
    dense_index: str,
    batch_size: int,
    progress: bool,
    stream: bool = False,  # `batches` reads its whole source once (parts) rather than per call
) -> PushReport:
    if batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    start = time.perf_counter()
    collection = open_collection(target)
    try:
        stamp = now()
        record = replace(record, pushed=stamp)
        if collection.exists():
            _check_target(collection, record)
        else:
            collection.create(record.dim, replace(record, count=0), dense_index)
            append = False  # nothing to skip
        sent = 0
        with ProgressBar(record.count, "pushing", enabled=progress, rate_unit="docs/s") as bar:
            wanted_all = _wanted(collection, record.count, batch_size, append, bar)
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
        held = collection.count()
        if held != record.count:
            raise RunFailure(f"{target} holds {held:,} rows after the push, not {record.count:,}: push again")
        collection.write_record(record)
    finally:
        collection.close()
    return PushReport(target, record.count, sent, time.perf_counter() - start)


def _wanted(
    collection: RemoteCollection, total: int, batch_size: int, append: bool, bar: ProgressBar
) -> list[int]:
    """The rows to send: all, or (`--append`) those the collection lacks (the others count as done)."""
    if not append:
        return list(range(total))
    wanted: list[int] = []
    for first in range(0, total, batch_size):
        last = min(total, first + batch_size)
        present = collection.rows_present(first, last)
        wanted += [row for row in range(first, last) if row not in present]
    bar.advance(total - len(wanted))
    return wanted


def _check_target(collection: RemoteCollection, record: PushRecord) -> None:
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
    if held.model_fingerprint != record.model_fingerprint:
        raise InputError(
            f"{target} holds vectors of model {held.model} (fingerprint {held.model_fingerprint}); "
            f"this source's are of {record.model} ({record.model_fingerprint}): use another --collection"
        )
    rows = collection.count()
    if rows > record.count:
        raise InputError(
            f"{target} holds {rows:,} rows, this source {record.count:,}: it holds another corpus; "
            "use another --collection"
        )
