"""A pushed collection searched like an index folder: its `MilvusStore` under the one search pipeline.

`MilvusStore` is a `RemoteCollection`'s `embedkit.search.store.SearchStore`: dense candidates come
from the server's vector search, lexical ones from its BM25, documents and stored vectors from its
entities, and a `--where` becomes the collection's filter expression. Everything above is the
local code: the pipeline's modes and fusions (`embedkit.search.pipeline`; prf included: its
feedback vectors are read back from the server, its second search is one more dense search
there), the CLI's printing and `hit_record`, and `eval retrieval`'s runs. Snippets are made here with
embedkit's own analyzer (`embedkit.search.snippets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.encode.batching import l2_normalize
from embedkit.errors import InputError
from embedkit.index.lexical import term_spans
from embedkit.index.search import SearchIndex
from embedkit.remote.base import RemoteCollection, RemoteTarget, is_remote, open_collection
from embedkit.search.fusion import bounded_k

if TYPE_CHECKING:
    from embedkit.data.document import Document, TextSpan
    from embedkit.encode.runtime import Runtime

Ranking = list[tuple[int, float]]


class MilvusStore:
    """A collection made by `embedkit push`, as the search pipeline reaches it (rows are index rows)."""

    passages = False  # a push sends indexes of whole documents
    has_lexical = True  # every pushed collection has its BM25 field

    def __init__(
        self, collection: RemoteCollection, count: int, dim: int, fields: dict[str, Any] | None
    ) -> None:
        self.collection = collection
        self.count = count
        self.dim = dim
        self.fields = fields  # the metadata fields the push recorded (None: an older push, unchecked)

    def compile_filter(self, where: str) -> str:
        """A `--where` as the collection's filter expression, checked against the metadata fields
        the push recorded (`embedkit.index.where`)."""
        from embedkit.index.where import parse
        from embedkit.index.where_fields import check
        from embedkit.remote.milvus import milvus_filter

        expr = parse(where)
        if self.fields is not None:
            check(expr, {name: set(types) for name, types in self.fields.items()})
        return milvus_filter(expr)

    def reachable(self, allowed: str | None) -> int:
        return self.count

    def document_count(self) -> int:
        return self.count

    def search_dense(self, vectors: np.ndarray, k: int, allowed: str | None) -> list[Ranking]:
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(
                f"query vectors of shape {queries.shape}; {self.collection.target} holds {self.dim}-d vectors"
            )
        k = bounded_k(k, self.count)
        if not len(queries) or not self.count:
            return [[] for _ in queries]
        found = self.collection.search_dense(np.ascontiguousarray(l2_normalize(queries)), k, allowed or "")
        return [hits[:k] for hits in found]

    def search_lexical(self, texts: Sequence[str], k: int, allowed: str | None) -> list[Ranking]:
        return self.collection.search_lexical(list(texts), bounded_k(k, self.count), allowed or "")

    def vectors_of_rows(self, rows: Sequence[int]) -> np.ndarray:
        return self.collection.vectors([int(r) for r in rows])

    def held_at(self, rows: Sequence[int]) -> dict[int, TextSpan]:
        return dict(self.collection.documents([int(r) for r in rows]))

    def document_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        return {row: row for row in self.collection.documents([int(r) for r in rows])}

    def documents_by_id(self, ids: Sequence[str]) -> list[Document | None]:
        from embedkit.data.values import check_ids

        wanted = check_ids(ids)
        found = self.collection.rows_of_ids(wanted)
        documents = self.collection.documents(list(found.values()))
        return [documents.get(found[i]) if i in found else None for i in wanted]

    def term_spans(self, text: str) -> list[tuple[str, int, int]]:
        return term_spans(text)  # embedkit's analyzer: the server's offsets do not come back

    def term_idf(self, terms: Sequence[str]) -> dict[str, float]:
        return {}  # the server's BM25 statistics are not read: snippets weigh terms within a text

    def close(self) -> None:
        self.collection.close()


def open_remote(uri: str, collection: str | None = None, token: str | None = None) -> SearchIndex:
    """`open_pushed` on a URI as the CLI takes it (`milvus://HOST:PORT` or FILE.db)."""
    return open_pushed(RemoteTarget.parse(uri, collection, token))


def open_pushed(target: RemoteTarget) -> SearchIndex:
    """The collection `embedkit push` filled at `target`, opened for search; a missing or foreign
    collection is an `InputError`.

    >>> index = open_pushed(RemoteTarget.parse("milvus://db:19530", "cranfield"))  # doctest: +SKIP
    >>> hits = index.search_text(["shock waves on a wing"], k=5, mode="hybrid")  # doctest: +SKIP
    """
    opened = open_collection(target)
    try:
        if not opened.exists():
            raise InputError(f"{target}: no such collection: push an index there first")
        record = opened.read_record()
        if record is None:
            raise InputError(f"{target} was not made by embedkit push (no push record)")
        dim = opened.dim()
        if dim != record.dim:
            raise InputError(f"{target} holds {dim}-d vectors; its push record says {record.dim}-d")
        count = opened.count()
    except BaseException:
        opened.close()
        raise
    meta: dict[str, Any] = {
        **record.as_index_meta(),
        "count": count,
        "metadata_fields": record.metadata_fields,
    }
    return SearchIndex(str(target), meta, MilvusStore(opened, count, dim, record.metadata_fields))


def open_search_index(
    location: str | Path,
    collection: str | None = None,
    token: str | None = None,
    *,
    runtime: Runtime | None = None,
) -> SearchIndex:
    """An index folder, or a collection `embedkit push` filled (a `milvus://` URI or FILE.db),
    opened for search: what `search`, `eval retrieval` and `serve` take as an index.

    `runtime`'s device cuda or cuda:N searches an index folder with faiss on that GPU
    (`SearchIndex.load`); a remote collection searches on its server, wherever the queries are
    embedded.
    """
    if is_remote(location):
        return open_remote(str(location), collection, token)
    if collection is not None or token is not None:
        raise InputError("--collection and --token go with a milvus:// or .db target, not an index folder")
    return SearchIndex.load(location, runtime=runtime)
