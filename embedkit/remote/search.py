"""A pushed collection opened as a `SearchIndex`: the local search code on the server's candidates.

`RemoteIndex` is a `SearchIndex` whose FAISS index and document store are thin views of a
`RemoteCollection`: dense candidates come from the server's vector search, lexical ones from its
BM25, documents and stored vectors from its entities. Everything above them is the local code:
`search_text`'s modes, the fusions of `embedkit.index.fusion` (prf included: its feedback
vectors are read back from the server, its second search is one more dense search there), the
CLI's printing and `hit_record`, and `eval retrieval`'s runs. Only snippets are local-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.errors import InputError
from embedkit.index.search import SearchIndex
from embedkit.remote.base import RemoteCollection, RemoteTarget, is_remote, open_collection

if TYPE_CHECKING:
    from embedkit.data.corpus import Document


class _Vectors:
    """The collection's dense side, with the faiss calls `SearchIndex` makes (search, reconstruct)."""

    def __init__(self, collection: RemoteCollection, count: int, dim: int) -> None:
        self.collection = collection
        self.ntotal = count
        self.d = dim

    def search(self, queries: np.ndarray, k: int, where: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), [q, k] each, padded with rows -1 (faiss's convention)."""
        found = self.collection.search_dense(queries, k, where)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        for i, hits in enumerate(found):
            for j, (row, score) in enumerate(hits[:k]):
                rows[i, j], scores[i, j] = row, score
        return scores, rows

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return self.collection.vectors([int(r) for r in rows])


class _Store:
    """The collection's documents and BM25 side, with the `DocStore` calls searching makes."""

    def __init__(self, collection: RemoteCollection) -> None:
        self.collection = collection
        self.lexical = collection  # never None: every pushed collection has its BM25 field

    def search_lexical(
        self, queries: Sequence[str], k: int, where: str | None = None
    ) -> list[list[tuple[int, float]]]:
        return self.collection.search_lexical(list(queries), k, where or "")

    def by_rows(self, rows: Sequence[int]) -> list[Document | None]:
        found = self.collection.documents([int(r) for r in rows])
        return [found.get(int(r)) for r in rows]

    def ids_of_rows(self, rows: Sequence[int]) -> dict[int, str]:
        return {row: doc.id for row, doc in self.collection.documents([int(r) for r in rows]).items()}

    def rows_of_ids(self, ids: Sequence[str]) -> list[int]:
        found = self.collection.rows_of_ids([str(i) for i in ids])
        missing = [i for i in ids if str(i) not in found]
        if missing:
            raise InputError(f"no document {missing[0]!r} in {self.collection.target}")
        return [found[str(i)] for i in ids]

    def by_ids(self, ids: Sequence[str]) -> list[Document | None]:
        found = self.collection.rows_of_ids([str(i) for i in ids])
        documents = self.collection.documents(list(found.values()))
        return [documents.get(found[str(i)]) if str(i) in found else None for i in ids]

    def next_row(self) -> int:
        return self.collection.count()

    def close(self) -> None:
        self.collection.close()


class RemoteIndex(SearchIndex):
    """A collection made by `embedkit push`, searched like an index folder.

    >>> index = RemoteIndex.open(RemoteTarget.parse("milvus://db:19530", "cranfield"))  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5, mode="hybrid")  # doctest: +SKIP
    """

    makes_snippets = False  # snippets need the local analyzer's offsets: none for a remote collection

    @classmethod
    def open(cls, target: RemoteTarget) -> RemoteIndex:
        """Connect and read the push record; a missing or foreign collection is an `InputError`."""
        collection = open_collection(target)
        try:
            if not collection.exists():
                raise InputError(f"{target}: no such collection: push an index there first")
            record = collection.read_record()
            if record is None:
                raise InputError(f"{target} was not made by embedkit push (no push record)")
            dim = collection.dim()
            if dim != record.dim:
                raise InputError(f"{target} holds {dim}-d vectors; its push record says {record.dim}-d")
            count = collection.count()
        except BaseException:
            collection.close()
            raise
        meta: dict[str, Any] = {
            **record.as_index_meta(),
            "count": count,
            "metadata_fields": record.metadata_fields,
        }
        return cls(str(target), meta, _Vectors(collection, count, dim), _Store(collection))  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Any, *, gpu: bool = False, device: str = "cpu") -> SearchIndex:
        raise InputError("a remote collection is opened with RemoteIndex.open(target)")

    def restriction(self, where: str | None) -> str | None:
        """A `--where` as the collection's filter expression, checked against the metadata fields
        the push recorded (`embedkit.index.where`; an older push recorded none: not checked)."""
        if where is None:
            return None
        from embedkit.index.where import check, parse
        from embedkit.remote.milvus import milvus_filter

        expr = parse(where)
        fields = self.meta.get("metadata_fields")
        if fields is not None:
            check(expr, {name: set(types) for name, types in fields.items()})
        return milvus_filter(expr)

    def _search_rows(
        self, query_vectors: np.ndarray, k: int, *, restriction: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        queries = np.asarray(query_vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(
                f"query vectors of shape {queries.shape}; {self.path} holds {self.dim}-d vectors"
            )
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        k = max(1, min(k, len(self)))
        if not len(queries) or not len(self):
            return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
        return self.index.search(np.ascontiguousarray(l2_normalize(queries)), k, restriction or "")

    def no_lexical_reason(self) -> str:
        return f"{self.path} has no BM25 field"

    def is_current(self) -> bool:
        return True  # a collection has no versions: pushes upsert into it and are seen at once


def open_search_index(
    location: str | Path,
    collection: str | None = None,
    token: str | None = None,
    *,
    gpu: bool = False,
    device: str = "cpu",
) -> SearchIndex:
    """An index folder, or a collection `embedkit push` filled (a `milvus://` URI or FILE.db),
    opened for search: what `search`, `eval retrieval` and `serve` take as an index.

    `device` cuda or cuda:N searches an index folder with faiss on that GPU (`SearchIndex.load`);
    a remote collection searches on its server, whatever `device` the queries are embedded on.
    """
    if is_remote(location):
        if gpu:
            raise InputError("--gpu searches a local index; a remote collection searches on its server")
        return open_remote(str(location), collection, token)
    if collection is not None or token is not None:
        raise InputError("--collection and --token go with a milvus:// or .db target, not an index folder")
    return SearchIndex.load(location, gpu=gpu, device=device)


def open_remote(uri: str, collection: str | None = None, token: str | None = None) -> RemoteIndex:
    """`RemoteIndex.open` on a URI as the CLI takes it (`milvus://HOST:PORT` or FILE.db)."""
    return RemoteIndex.open(RemoteTarget.parse(uri, collection, token))
