"""A searchable index folder: FAISS vectors, SQLite documents, and a JSON record of how it was made.

INDEX_DIR holds
- `index.faiss`: L2-normalized vectors, inner product (= cosine similarity), always in CPU form;
- `docs.sqlite`: the documents (`embedkit.docstore`); FAISS position i is the document at row i;
- `embedkit-index.json`: model path and fingerprint, dim, metric, kind and parameters, count, times.

Every write builds a complete folder beside INDEX_DIR and renames it into place (`atomic_dir`); an
append works on a copy. A crash at any point leaves the previous index intact.

Kinds: `flat` (exact), `hnsw` (graph, approximate, fast), `ivf-pq` (compressed, for corpora whose
vectors do not fit in memory). `auto` picks flat under `AUTO_FLAT_MAX` vectors, HNSW above, and
IVF-PQ when an HNSW index would take more than half of this machine's memory (or on the GPU,
where faiss has no HNSW).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.atomic import atomic_dir, write_json_atomic
from embedkit.batching import l2_normalize
from embedkit.docstore import DocStore
from embedkit.embed import CorpusOptions, as_encoder, count_documents, embed_corpus
from embedkit.errors import InputError
from embedkit.index_kinds import (  # noqa: F401 (re-exported: the index's public settings)
    AUTO_FLAT_MAX,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    IVF_NPROBE,
    IVF_PQ_MIN_DOCS,
    KINDS,
    PQ_DIMS_PER_BYTE,
    GpuPlacement,
    _faiss,
    choose_kind,
    index_params,
    new_faiss_index,
    train_ivf,
)
from embedkit.modelfolder import model_fingerprint, read_json, read_model_spec

if TYPE_CHECKING:
    from embedkit.corpus import Document
    from embedkit.encoder import Encoder

META_FILE = "embedkit-index.json"
INDEX_FILE = "index.faiss"
DOCS_FILE = "docs.sqlite"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its cosine similarity, its FAISS row."""

    id: str
    score: float
    row: int
    document: Document | None = None  # filled by `search_text`


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


# --- the folder ----------------------------------------------------------------------------------


def read_index_meta(path: str | Path) -> dict[str, Any]:
    """The folder's `embedkit-index.json`, checked; an `InputError` if it is not an index folder."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"index folder not found: {path}")
    if not (path / META_FILE).is_file():
        raise InputError(f"not an embedkit index: {path} has no {META_FILE}")
    meta = read_json(path / META_FILE)
    needed = ("version", "model", "model_fingerprint", "dim", "kind", "params", "count", "index_bytes")
    missing = [key for key in needed if key not in meta]
    if missing:
        raise InputError(f"{path / META_FILE} lacks {', '.join(missing)}: rebuild the index")
    if meta["version"] != FORMAT_VERSION:
        raise InputError(f"{path} is index format {meta['version']}; this embedkit reads {FORMAT_VERSION}")
    return meta


def check_index_file(path: Path, meta: dict[str, Any]) -> None:
    """A missing index file, or one whose size is not the size written, is an `InputError`."""
    if not path.is_file():
        raise InputError(f"index file missing: {path}")
    size = path.stat().st_size
    if size != int(meta["index_bytes"]):
        expected = meta["index_bytes"]
        raise InputError(f"index file {path} is truncated or altered: {size} bytes, not {expected}")


def read_faiss(path: Path, meta: dict[str, Any]):  # -> faiss.Index
    """Read `index.faiss`, checked against the metadata: a truncated or corrupt file is an `InputError`."""
    check_index_file(path, meta)
    try:
        index = _faiss().read_index(str(path))
    except RuntimeError as exc:
        raise InputError(f"corrupt index file {path}: {str(exc).strip().splitlines()[-1]}") from None
    if index.ntotal != int(meta["count"]) or index.d != int(meta["dim"]):
        raise InputError(
            f"index file {path} holds {index.ntotal} vectors of dim {index.d}; "
            f"its metadata says {meta['count']} of dim {meta['dim']}"
        )
    return index


def check_model_for(meta: dict[str, Any], model: str | Path | None = None) -> Path:
    """The model folder for an index's queries: `model`, else the recorded one; checked.

    A model of another dim or fingerprint would give wrong results without an error, so it is an
    `InputError`. An ONNX export records its source model's fingerprint, so it passes.
    """
    if model is None:
        model = Path(meta["model"])
        if not model.exists():
            raise InputError(f"the index's model {model} is missing: pass --model with the same model")
    spec = read_model_spec(model)
    if spec.dim != int(meta["dim"]):
        raise InputError(f"model {spec.path} gives {spec.dim}-d vectors; the index holds {meta['dim']}-d")
    fingerprint = model_fingerprint(spec.path)
    if fingerprint != meta["model_fingerprint"]:
        raise InputError(
            f"model {spec.path} (fingerprint {fingerprint}) is not the model the index was built with "
            f"({meta['model']}, fingerprint {meta['model_fingerprint']})"
        )
    return spec.path


def open_model_for(
    meta: dict[str, Any], model: str | Path | None = None, device: str = "auto", precision: str | None = None
) -> Encoder:
    """`load_encoder` on `check_model_for(meta, model)`."""
    from embedkit.encoder import load_encoder

    return load_encoder(check_model_for(meta, model), device=device, precision=precision)


# --- building ------------------------------------------------------------------------------------


def build_index(
    corpus: str | Path,
    out: str | Path,
    model: Encoder | str | Path | None = None,
    *,
    kind: str = "auto",  # auto, flat, hnsw or ivf-pq
    append: bool = False,  # add to the index in `out`
    overwrite: bool = False,  # replace the index in `out`
    gpu: bool = False,  # build with faiss's GPU index (saved in CPU form)
    options: CorpusOptions | None = None,  # columns, chunk and batch sizes
    device: str = "auto",  # where the model runs, when `model` is not an open encoder
    precision: str | None = None,  # ONNX precision, likewise
    progress: bool = False,
) -> IndexReport:
    """Embed `corpus` and build the index folder `out`, or with `append` add to it.

    `model`: an open encoder or a model folder (None: the bundled model; with `append`, the index's
    own model). A new index needs an absent or empty `out`, or `overwrite` to replace an index. An
    append keeps the index's kind and model (a given model must have the same fingerprint, or be its
    ONNX export). Document ids must be unique: an id already present is an `InputError`.
    """
    out = Path(out)
    options = options or CorpusOptions()
    if kind not in KINDS:
        raise InputError(f"unknown index kind {kind!r}: use {', '.join(KINDS)}")
    old = read_index_meta(out) if append else None
    if old is None:
        _check_new_target(out, overwrite)
    elif kind not in ("auto", old["kind"]):
        raise InputError(f"--kind {kind} differs from the index's kind {old['kind']}; an append keeps it")
    else:
        check_index_file(out / INDEX_FILE, old)  # before minutes of embedding
    if old is not None and gpu and old["kind"] == "hnsw":
        raise InputError("faiss has no GPU HNSW index: append to this index without --gpu")
    placement = GpuPlacement() if gpu else None
    count = count_documents(corpus, options)
    if old is not None and not hasattr(model, "encode"):
        encoder = open_model_for(old, model, device, precision)
    else:
        encoder = as_encoder(model, device, precision)
    if old is not None and (encoder.fingerprint != old["model_fingerprint"] or encoder.dim != old["dim"]):
        raise InputError(f"the encoder's model is not {old['model']}, the model this index was built with")
    if old is None:
        chosen, reason = choose_kind(kind, count, encoder.dim, gpu=gpu)
        params = index_params(chosen, count, encoder.dim)
    else:
        chosen, reason, params = old["kind"], "the index's kind", dict(old["params"])
    truncated_before = encoder.truncated
    start = time.perf_counter()
    with atomic_dir(out) as tmp:
        if old is None:
            index, store = new_faiss_index(chosen, encoder.dim, params), DocStore.create(tmp / DOCS_FILE)
        else:
            for name in (INDEX_FILE, DOCS_FILE):
                shutil.copy2(out / name, tmp / name)
            index, store = read_faiss(tmp / INDEX_FILE, old), DocStore.open(tmp / DOCS_FILE, writable=True)
        work = placement.to_gpu(index, chosen) if placement else index
        try:
            _fill(work, store, encoder, corpus, count, options, tmp, progress)
            store.commit()
        finally:
            store.close()
        index = placement.to_cpu(work) if placement else work
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        meta = {
            "version": FORMAT_VERSION,
            "model": str(Path(encoder.path).resolve()),
            "model_fingerprint": encoder.fingerprint,
            "model_backend": encoder.backend,
            "dim": encoder.dim,
            "max_seq_length": encoder.max_seq_length,
            "metric": "inner_product",
            "normalized": True,
            "kind": chosen,
            "kind_reason": old["kind_reason"] if old else reason,
            "params": params,
            "count": int(index.ntotal),
            "index_bytes": _write_faiss(index, tmp / INDEX_FILE),
            "created": old["created"] if old else now,
            "updated": now,
            "sources": [*(old.get("sources", []) if old else []), {"corpus": str(corpus), "added": count}],
        }
        write_json_atomic(tmp / META_FILE, meta)
    seconds, truncated = time.perf_counter() - start, encoder.truncated - truncated_before
    return IndexReport(
        out,
        chosen,
        reason,
        params,
        count,
        meta["count"],
        seconds,
        truncated,
        encoder.backend,
        str(encoder.device),
        appended=old is not None,
    )


def _check_new_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; give a folder for the index")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / META_FILE).is_file():
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
) -> None:
    """Embed the corpus into `store` and `index` (a CPU or GPU index).

    An untrained IVF-PQ index cannot take vectors before it is trained on a sample of them, so its
    vectors go to a memory map in the build folder first.
    """
    first_row = store.next_row()
    if first_row != index.ntotal:
        raise InputError(f"{store.path} holds {first_row} documents but the index {index.ntotal} vectors")
    buffer_path = tmp / "vectors.tmp.npy"
    buffer = None
    if not index.is_trained:
        buffer = np.lib.format.open_memmap(buffer_path, "w+", np.float32, (count, index.d))

    def write(offset: int, documents: list[Document], vectors: np.ndarray) -> None:
        store.add(first_row + offset, documents)
        if buffer is None:
            index.add(vectors)
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
    )
    if buffer is not None:
        train_ivf(index, buffer, options.chunk_size)
        buffer_path.unlink()  # the map stays valid until it is freed (POSIX)


def _write_faiss(index, path: Path) -> int:
    _faiss().write_index(index, str(path))
    return path.stat().st_size


# --- searching -----------------------------------------------------------------------------------


class SearchIndex:
    """An index folder opened for search.

    >>> index = SearchIndex.load("cranfield-index")  # doctest: +SKIP
    >>> scores, ids = index.search(query_vectors, k=10)  # plain arrays, as faiss  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5)  # with the documents  # doctest: +SKIP
    """

    def __init__(self, path: Path, meta: dict[str, Any], index, store: DocStore, placement=None) -> None:
        self.path = path
        self.meta = meta
        self.index = index
        self.store = store
        self._placement = placement  # holds the GPU resources as long as the index lives
        self._encoder: Encoder | None = None

    @classmethod
    def load(cls, path: str | Path, *, gpu: bool = False) -> SearchIndex:
        """Open an index folder; a missing, truncated or corrupt file is an `InputError`."""
        path = Path(path)
        meta = read_index_meta(path)
        index = read_faiss(path / INDEX_FILE, meta)
        store = DocStore.open(path / DOCS_FILE)
        if store.next_row() != index.ntotal:
            store.close()
            raise InputError(f"{path / DOCS_FILE} does not match {path / INDEX_FILE}: rebuild the index")
        placement = GpuPlacement() if gpu else None
        if placement is not None:
            index = placement.to_gpu(index, meta["kind"])
        return cls(path, meta, index, store, placement)

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    def search(self, query_vectors: np.ndarray, k: int = 10) -> tuple[np.ndarray, list[list[str | None]]]:
        """Scores float32 [q, k] and doc ids [q][k] of each query's `k` nearest documents, best first.

        `query_vectors` is [q, dim] (or [dim]); it is L2-normalized here, so scores are cosine
        similarities whatever the caller passes. `k` is capped at the index's size; an id is None
        where an approximate index found fewer than `k` documents.
        """
        scores, rows = self._search_rows(query_vectors, k)
        ids = self.store.ids_of_rows(rows[rows >= 0].tolist())
        return scores, [[ids[int(r)] if r >= 0 else None for r in row] for row in rows]

    def _search_rows(self, query_vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(f"query vectors of shape {queries.shape}; this index holds {self.dim}-d vectors")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        k = max(1, min(k, len(self)))
        if not len(queries) or not len(self):
            return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        return self.index.search(np.ascontiguousarray(l2_normalize(queries)), k)

    def encoder(
        self, model: str | Path | None = None, device: str = "auto", precision: str | None = None
    ) -> Encoder:
        """The index's model (or `model`, after `check_model_for`), opened once."""
        if self._encoder is None:
            self._encoder = open_model_for(self.meta, model, device, precision)
        return self._encoder

    def check_encoder(self, encoder: Encoder) -> None:
        """An `InputError` unless `encoder` runs the model this index was built with."""
        if encoder.fingerprint != self.meta["model_fingerprint"] or encoder.dim != self.dim:
            name = getattr(encoder, "path", "the encoder")
            raise InputError(
                f"model {name} (fingerprint {encoder.fingerprint}, dim {encoder.dim}) is not the model "
                f"the index {self.path} was built with ({self.meta['model']})"
            )

    def search_text(
        self, queries: str | Sequence[str], k: int = 10, encoder: Encoder | None = None
    ) -> list[list[Hit]]:
        """Embed `queries` with the index's model (or `encoder`) and return hits with their documents."""
        items = [queries] if isinstance(queries, str) else list(queries)
        encoder = encoder or self.encoder()
        self.check_encoder(encoder)
        vectors = encoder.encode(items, normalize=True).reshape(len(items), -1)
        scores, rows = self._search_rows(vectors, k)  # (Q, k) each
        found = rows[rows >= 0].tolist()
        docs = dict(zip(found, self.store.by_rows(found), strict=True))
        return [
            [Hit(docs[r].id, float(scores[q, j]), r, docs[r]) for j, r in enumerate(row) if r >= 0]
            for q, row in enumerate(rows.tolist())
        ]

    def get_documents(self, ids: Sequence[str]) -> list[Document | None]:
        """Stored documents by id (None for an unknown id), in the order asked."""
        return self.store.by_ids(ids)


def open_index_for(path: str | Path, encoder: Encoder, *, gpu: bool = False) -> SearchIndex:
    """`SearchIndex.load(path)`, checked to hold vectors of `encoder`'s model (else an `InputError`)."""
    index = SearchIndex.load(path, gpu=gpu)
    try:
        index.check_encoder(encoder)
    except InputError:
        index.close()
        raise
    return index
