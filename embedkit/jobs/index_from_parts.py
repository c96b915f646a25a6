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
written with `--no-normalize` index alike. `dim` keeps the first N dimensions of each, renormalized
(`index --dim`), and `quantize` builds codes (`embedkit.index.quantized`) with the float vectors
written beside them a chunk at a time; an int8 quantizer trains on the fixed-seed sample a
single-pass build draws, so both builds hold the same codes. The index records the parts (file
names, vector counts) in its `sources`, and the model that made them, so that queries are embedded
by the same model.
"""

from __future__ import annotations

import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.encode.default_onnx import recorded_model_path
from embedkit.encode.dimensions import truncate_vectors
from embedkit.encode.model_folder import ModelSpec
from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError, RunFailure
from embedkit.index.build_report import IndexReport
from embedkit.index.docstore import DocStore
from embedkit.index.faiss_gpu import placement_for
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, check_new_target, relative_model
from embedkit.index.kinds import ivf_training_rows
from embedkit.index.lexical_rebuild import fill_lexical
from embedkit.index.meta import IndexMeta, new_index_id, now
from embedkit.index.quantized import FULL_VECTORS, int8_training_rows, kind_and_params, new_index
from embedkit.index.rows import add_rows
from embedkit.index.version_copy import write_faiss
from embedkit.jobs.parts import Part, check_corpus, model_of_parts, normalized, read_parts
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
    # device cuda or cuda:N: build with faiss on that GPU, saved in CPU form (nothing is embedded)
    runtime: Runtime | None = None,
    device: str | None = None,  # the older spelling of `runtime` (gpu=True, deprecated: cuda)
    gpu: bool = False,
    options: CorpusOptions | None = None,  # how to read the corpus (columns); chunk_size: rows per add
    progress: bool = False,
    lexical: bool = True,
    dim: int | None = None,  # keep the first `dim` dimensions, renormalized (None: all)
    quantize: str | None = None,  # int8 or binary codes with float rescoring (None: float vectors)
) -> IndexReport:
    """Build the index folder `out` from the part files in `vectors` and the documents of `corpus`.

    `model`: the model folder the index records for its queries (None: the one the parts record).
    It must be the model that embedded the parts (same fingerprint and dim; its ONNX export
    passes): it is given where the recorded path does not exist on this machine. Incomplete or
    corrupt parts, a corpus that is not the parts' corpus, or ids out of order are `InputError`s.
    """
    out, folder = Path(out), Path(vectors)
    options = options or CorpusOptions()
    parts = read_parts(folder)
    first = parts[0].info
    spec = model_of_parts(parts, model)
    check_new_target(out, overwrite)
    total, dim = first.total, _kept_dim(dim, first.dim)
    placement = placement_for(runtime_of(runtime, gpu, device=device))
    chosen, reason, params = kind_and_params(kind, quantize, total, dim, on_gpu=placement is not None)
    fingerprint = check_corpus(parts, corpus, options, progress)
    start = time.perf_counter()
    with new_version(out) as tmp:
        store = DocStore.create(tmp / DOCS_FILE)
        if lexical:
            fill_lexical(store)
        index = new_index(chosen, dim, params)
        work = placement.to_gpu(index, chosen) if placement else index
        full = _full_vectors(tmp, total, dim) if quantize else None
        try:
            if not work.is_trained:
                rows = int8_training_rows(total) if quantize else ivf_training_rows(total, work.nlist)
                work.train(_training_sample(parts, total, rows, dim))
            _fill(work, store, parts, corpus, options, progress, dim, full)
            store.commit()
        finally:
            store.close()
        index = placement.to_cpu(work) if placement else work
        lexical_record = store.lexical.settings.to_json() if store.lexical is not None else None
        built = {"kind": chosen, "kind_reason": reason, "params": params, "lexical": lexical_record}
        source = {"corpus": str(corpus), "added": total, "vectors": str(folder)}
        meta = _recorded(parts, spec, out, tmp, index, source, fingerprint, built)
    device = placement.name if placement else "cpu"
    return IndexReport(
        out, chosen, reason, params, total, meta.count, time.perf_counter() - start, 0, "faiss", device,
        appended=False, faiss_device=device,
    )  # fmt: skip


def _recorded(
    parts: list[Part],
    spec: ModelSpec,
    out: Path,
    tmp: Path,
    index,
    source: dict,
    fingerprint: str,
    built: dict,
) -> IndexMeta:
    """The FAISS file and the metadata of the version: the parts' model, and the parts in its source."""
    first, stamp = parts[0].info, now()
    source = {**source, "parts": [{"file": part.npy.name, "vectors": part.info.count} for part in parts]}
    meta = IndexMeta(
        model=str(recorded_model_path(spec)),
        model_relative=relative_model(recorded_model_path(spec), out),
        model_fingerprint=first.model_fingerprint,
        model_backend=first.model_backend,
        dim=index.d,
        max_seq_length=first.max_seq_length,
        count=int(index.ntotal),
        corpus_fingerprint=fingerprint,
        index_bytes=write_faiss(index, tmp / INDEX_FILE),
        created=stamp,
        updated=stamp,
        index_id=new_index_id(),
        sources=[source],
        model_dim=first.dim if index.d != first.dim else None,  # an index of the first `dim` (--dim)
        **built,
    )
    write_json_atomic(tmp / META_FILE, meta.to_json())
    return meta


def _kept_dim(dim: int | None, parts_dim: int) -> int:
    """The index's dimension: `dim` of the parts' `parts_dim`, checked (None: all of them)."""
    if dim is None:
        return parts_dim
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= parts_dim:
        raise InputError(f"--dim {dim!r}: the parts hold {parts_dim}-d vectors; use 1 to {parts_dim}")
    return dim


def _full_vectors(tmp: Path, total: int, dim: int) -> np.memmap:
    """The quantized index's `FULL_VECTORS`, [total, dim] float32, memory-mapped to be filled."""
    return np.lib.format.open_memmap(tmp / FULL_VECTORS, mode="w+", dtype=np.float32, shape=(total, dim))


def _training_sample(parts: list[Part], total: int, rows: np.ndarray | slice, dim: int) -> np.ndarray:
    """`rows` of the corpus (IVF-PQ's or an int8 quantizer's sample) gathered from the parts'
    memory maps, normalized and cut to `dim`.

    Written into one array sized up front: the sample is the largest thing a build holds (2M
    vectors, 3 GB, at 100M documents), so it is never held twice.
    """
    size = total if isinstance(rows, slice) else len(rows)
    sample = np.empty((size, dim), dtype=np.float32)
    filled = 0
    for part in parts:
        start, count = part.info.start, part.info.count
        if not count:
            continue
        if isinstance(rows, slice):
            local: Any = slice(None)
        else:
            local = rows[(rows >= start) & (rows < start + count)] - start
        piece = _kept(normalized(part.vectors()[local], part), dim)
        sample[filled : filled + len(piece)] = piece
        filled += len(piece)
    return sample


def _kept(vectors: np.ndarray, dim: int) -> np.ndarray:
    """Unit `vectors` cut to their first `dim` dimensions, renormalized (themselves if all kept)."""
    return vectors if vectors.shape[1] == dim else truncate_vectors(vectors, dim)


def _fill(
    index,
    store: DocStore,
    parts: list[Part],
    corpus,
    options: CorpusOptions,
    progress: bool,
    dim: int,
    full: np.memmap | None,
) -> None:
    """Add each part's vectors, a chunk at a time, and the matching documents to the store (and
    a quantized index's float vectors to `full`)."""
    documents = read_corpus(corpus, options)
    total = parts[0].info.total
    row = 0
    with ProgressBar(total, "indexing", enabled=progress, rate_unit="vec/s", transient=True) as bar:
        for part in parts:
            vectors, ids = part.vectors(), part.read_ids()
            for offset in range(0, part.info.count, options.chunk_size):
                block = _kept(normalized(vectors[offset : offset + options.chunk_size], part), dim)
                chunk = list(islice(documents, len(block)))
                if [str(doc.id) for doc in chunk] != ids[offset : offset + len(block)]:
                    raise RunFailure(f"{corpus} changed while it was read: its ids no longer match the parts")
                store.add(row, chunk)
                if full is not None:
                    full[row : row + len(block)] = block
                add_rows(index, block, row)  # a binary index takes the codes of the block
                row += len(block)
                bar.advance(len(block))
            del vectors  # the part's map is released before the next one is opened
    if next(documents, None) is not None:
        raise RunFailure(f"{corpus} changed while it was read: it holds more documents than the parts")
    if full is not None:
        full.flush()
