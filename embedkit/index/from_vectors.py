"""Building an index folder from part files, without embedding again (`embedkit index --from-vectors`).

The parts (`embedkit.jobs.parts`: `embed --shard I/N` or `embed --ray`, on any number of
machines) are checked before any work: a complete set, each part's files consistent, one model.
The corpus is then read once against them: its documents must be the parts' documents, in order
(ids equal, and each part's fingerprint of ids, titles and texts equal), so the store's row i is
the document whose vector is at FAISS position i. Then one streaming pass adds each part's vectors,
a chunk at a time from a memory map, and the documents (with the BM25 tables) to the store.

IVF-PQ trains first, on the same fixed-seed sample of rows a single-pass build draws
(`kinds.ivf_training_rows`), gathered across the parts; then the parts are added one after the
other. Memory holds the training sample, one chunk of vectors and the index's codes (48 bytes a
384-d vector), never all vectors: 100M documents index on one machine from 150 GB of parts.

Vectors are L2-normalized as they are added (as `build_index` asks its encoder to), so parts
written with `--no-normalize` index alike. The index records the parts (file names, vector counts)
in its `sources`, and the model that made them, so that queries are embedded by the same model.
"""

from __future__ import annotations

import io
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.fingerprint import CorpusFingerprint, combined
from embedkit.data.input_files import open_input
from embedkit.encode.default_onnx import recorded_model_path
from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.errors import InputError, RunFailure
from embedkit.index.build import IndexReport, check_new_target
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, relative_model
from embedkit.index.kinds import (
    KINDS,
    choose_kind,
    index_params,
    ivf_training_rows,
    new_faiss_index,
)
from embedkit.index.meta import IndexMeta, new_index_id, now
from embedkit.index.version_copy import write_faiss
from embedkit.jobs.parts import Part, read_parts
from embedkit.jobs.streaming import CorpusOptions, read_corpus
from embedkit.progress import ProgressBar
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.locking import locked
from embedkit.storage.versioned import new_version


@locked("out")
def build_index_from_vectors(
    vectors: str | Path,
    corpus: str | Path,
    out: str | Path,
    model: str | Path | None = None,
    *,
    kind: str = "auto",  # auto, flat, hnsw or ivf-pq, as for `build_index`
    overwrite: bool = False,
    gpu: bool = False,  # build with faiss's GPU index on GPU 0 (saved in CPU form)
    device: str = "cpu",  # cuda or cuda:N: build with faiss on that GPU (nothing is embedded)
    options: CorpusOptions | None = None,  # how to read the corpus (columns); chunk_size: rows per add
    progress: bool = False,
    lexical: bool = True,
) -> IndexReport:
    """Build the index folder `out` from the part files in `vectors` and the documents of `corpus`.

    `model`: the model folder the index records for its queries (None: the one the parts record).
    It must be the model that embedded the parts (same fingerprint and dim; its ONNX export
    passes): it is given where the recorded path does not exist on this machine. Incomplete or
    corrupt parts, a corpus that is not the parts' corpus, or ids out of order are `InputError`s.
    """
    out, folder = Path(out), Path(vectors)
    options = options or CorpusOptions()
    if kind not in KINDS:
        raise InputError(f"unknown index kind {kind!r}: use {', '.join(KINDS)}")
    parts = read_parts(folder)
    first = parts[0].info
    spec = _model_for(parts, model)
    check_new_target(out, overwrite)
    total, dim = first.total, first.dim
    placement = placement_for(device, gpu)
    chosen, reason = choose_kind(kind, total, dim, gpu=placement is not None)
    params = index_params(chosen, total, dim)
    fingerprint = _check_corpus(parts, corpus, options, progress)
    start = time.perf_counter()
    with new_version(out) as tmp:
        store = DocStore.create(tmp / DOCS_FILE)
        if lexical:
            store.enable_lexical()
        index = new_faiss_index(chosen, dim, params)
        work = placement.to_gpu(index, chosen) if placement else index
        try:
            if not work.is_trained:
                work.train(_training_sample(parts, total, work.nlist))
            _fill(work, store, parts, corpus, options, progress)
            store.commit()
        finally:
            store.close()
        index = placement.to_cpu(work) if placement else work
        stamp = now()
        source = {
            "corpus": str(corpus),
            "added": total,
            "vectors": str(folder),
            "parts": [{"file": part.npy.name, "vectors": part.info.count} for part in parts],
        }
        meta = IndexMeta(
            model=str(recorded_model_path(spec)),
            model_relative=relative_model(recorded_model_path(spec), out),
            model_fingerprint=first.model_fingerprint,
            model_backend=first.model_backend,
            dim=dim,
            max_seq_length=first.max_seq_length,
            kind=chosen,
            kind_reason=reason,
            params=params,
            lexical=store.lexical.settings.to_json() if store.lexical is not None else None,
            count=int(index.ntotal),
            corpus_fingerprint=fingerprint,
            index_bytes=write_faiss(index, tmp / INDEX_FILE),
            created=stamp,
            updated=stamp,
            index_id=new_index_id(),
            sources=[source],
        )
        write_json_atomic(tmp / META_FILE, meta.to_json())
    return IndexReport(
        out,
        chosen,
        reason,
        params,
        total,
        meta.count,
        time.perf_counter() - start,
        0,
        "faiss",
        placement.name if placement else "cpu",
        appended=False,
        faiss_device=placement.name if placement else "cpu",
    )


def _model_for(parts: list[Part], model: str | Path | None) -> ModelSpec:
    """The model the index records: `model`, else the parts' own; it must be the parts' model."""
    first = parts[0].info
    if model is None:
        try:
            spec = read_model_spec(first.model)
        except InputError as exc:
            raise InputError(
                f"the parts' model {first.model} cannot be opened here ({exc}): pass --model with that model"
            ) from None
    else:
        spec = read_model_spec(model)
    if spec.dim != first.dim:
        raise InputError(f"model {spec.path} gives {spec.dim}-d vectors; the parts hold {first.dim}-d")
    from embedkit.encode.identity import check_same_model, model_identity

    # the parts may hold int8 vectors: the model at either precision class may have embedded them
    identities = [model_identity(spec, precision) for precision in ("fp32", "int8")]
    match = next((i for i in identities if i.fingerprint == first.model_fingerprint), identities[0])
    check_same_model(first.model_fingerprint, first.model, match.fingerprint, spec.path, "the parts", match)
    return spec


def _check_corpus(parts: list[Part], corpus: str | Path, options: CorpusOptions, progress: bool) -> str:
    """Read `corpus` against the parts' ids and fingerprints; the corpus's fingerprint."""
    documents = read_corpus(corpus, options)
    total = parts[0].info.total
    row = 0
    with ProgressBar(total, "checking", enabled=progress, rate_unit="docs/s", transient=True) as bar:
        for part in parts:
            fingerprint = CorpusFingerprint()
            with open_input(part.ids, "ids file", gunzip=False) as raw:
                ids = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
                for line in islice(ids, part.info.count):
                    doc = next(documents, None)
                    if doc is None:
                        raise InputError(
                            f"{corpus} holds {row} documents; the parts were embedded from {total}"
                        )
                    expected = line.rstrip("\n")
                    if str(doc.id) != expected:
                        raise InputError(
                            f"part {part.info.name}: row {row - part.info.start} has id {expected!r}, but "
                            f"document {row + 1} of {corpus} is {doc.id!r}: not the corpus (or order) "
                            "the parts were embedded from"
                        )
                    fingerprint.add_fields(doc.id, doc.title, doc.text)
                    row += 1
            if fingerprint.hex != part.info.corpus_fingerprint:
                raise InputError(
                    f"part {part.info.name}: the texts of its documents in {corpus} are not the ones it was "
                    "embedded from (same ids, other texts): embed that part again"
                )
            bar.advance(part.info.count)
    if next(documents, None) is not None:
        raise InputError(f"{corpus} holds more documents than the {total} the parts were embedded from")
    return combined(*(part.info.corpus_fingerprint for part in parts)) or ""


def _normalized(vectors: np.ndarray, part: Part) -> np.ndarray:
    """Unit rows, float32, C order (as `build_index`'s encoder returns them)."""
    out = np.array(vectors, dtype=np.float32, order="C")
    if not np.all(np.isfinite(out)):
        raise InputError(f"part {part.info.name}: {part.npy.name} holds NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)  # a zero row stays zero rather than NaN
    return out


def _training_sample(parts: list[Part], total: int, nlist: int) -> np.ndarray:
    """The rows `ivf_training_rows` picks, gathered from the parts' memory maps and normalized.

    Written into one array sized up front: the sample is the largest thing a build holds (2M
    vectors, 3 GB, at 100M documents), so it is never held twice.
    """
    rows = ivf_training_rows(total, nlist)
    size = total if isinstance(rows, slice) else len(rows)
    sample = np.empty((size, parts[0].info.dim), dtype=np.float32)
    filled = 0
    for part in parts:
        start, count = part.info.start, part.info.count
        if not count:
            continue
        if isinstance(rows, slice):
            local: Any = slice(None)
        else:
            local = rows[(rows >= start) & (rows < start + count)] - start
        piece = _normalized(part.vectors()[local], part)
        sample[filled : filled + len(piece)] = piece
        filled += len(piece)
    return sample


def _fill(index, store: DocStore, parts: list[Part], corpus, options: CorpusOptions, progress: bool) -> None:
    """Add each part's vectors, a chunk at a time, and the matching documents to the store."""
    documents = read_corpus(corpus, options)
    total = parts[0].info.total
    row = 0
    with ProgressBar(total, "indexing", enabled=progress, rate_unit="vec/s", transient=True) as bar:
        for part in parts:
            vectors, ids = part.vectors(), part.read_ids()
            for offset in range(0, part.info.count, options.chunk_size):
                block = _normalized(vectors[offset : offset + options.chunk_size], part)
                chunk = list(islice(documents, len(block)))
                if [str(doc.id) for doc in chunk] != ids[offset : offset + len(block)]:
                    raise RunFailure(f"{corpus} changed while it was read: its ids no longer match the parts")
                store.add(row, chunk)
                index.add(block)
                row += len(block)
                bar.advance(len(block))
            del vectors  # the part's map is released before the next one is opened
    if next(documents, None) is not None:
        raise RunFailure(f"{corpus} changed while it was read: it holds more documents than the parts")
