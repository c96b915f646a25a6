"""The Milvus adapter of `embedkit.remote.base.RemoteCollection` (a Milvus server, or a Milvus Lite file).

Schema of a collection, one entity per document:
- `row` INT64, the primary key: the document's index row, so a row pushed twice is stored once;
- `doc_id` VARCHAR, `title` VARCHAR, `metadata` JSON: the document as the index stores it;
- `body` VARCHAR: title + " " + text (text alone without a title), the text BM25 reads locally too;
  the document's text is `body` minus the title, so it is stored once. Its analyzer is Milvus's
  standard tokenizer, lowercase, Lucene's English stopwords and the English Snowball stemmer:
  `embedkit.index.lexical`'s analysis but for its NFKC step and its word pattern (docs/milvus.md);
- `sparse`: the BM25 Function's output over `body` (k1 1.2, b 0.75, as tantivy's);
- `dense` FLOAT_VECTOR: the index's normalised vectors, inner product (= cosine), FLAT (exact) or HNSW.
The push record (`PushRecord`) is the collection property `embedkit.push`, JSON.

Milvus Lite (`milvus-lite` 3.x, pure Python) differs from a server on the BM25 side: its analyzer
drops the stemmer filter, its IDF is computed per segment, and it reports BM25 as a negative
distance; scores are taken as their absolute value here so both read higher-is-better.
pymilvus is imported inside the functions: `embedkit --help` and local search never load it.
"""

from __future__ import annotations

import contextlib
import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.errors import InputError
from embedkit.index.lexical import LUCENE_ENGLISH_STOPWORDS
from embedkit.remote.base import PushRecord, RemoteTarget
from embedkit.remote.lite import check_lite_path
from embedkit.remote.milvus_calls import calls, import_pymilvus

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.index.where import Expr

RECORD_PROPERTY = "embedkit.push"
MAX_VARCHAR = 65535  # Milvus's VARCHAR limit, in bytes
QUERY_BATCH = 1000  # entities per query or search request (Milvus caps a request at 64 MiB)
CONNECT_TIMEOUT = 10.0  # seconds before an unreachable server is reported
DENSE_INDEXES = {"FLAT": {}, "HNSW": {"M": 32, "efConstruction": 200}}  # as `embedkit.index.kinds`
HNSW_EF = 128  # search breadth of HNSW (at least k)
ANALYZER = {
    "tokenizer": "standard",
    "filter": [
        "lowercase",
        {"type": "stop", "stop_words": sorted(LUCENE_ENGLISH_STOPWORDS)},
        {"type": "stemmer", "language": "english"},
    ],
}
BM25 = {"bm25_k1": 1.2, "bm25_b": 0.75}
_DOC_FIELDS = ["doc_id", "title", "body", "metadata"]


def body_of(doc: Document) -> str:
    """The text BM25 reads, title + " " + text, as `embedkit.index.lexical` indexes it."""
    return f"{doc.title} {doc.text}" if doc.title else doc.text


class MilvusCollection:
    """One collection on a Milvus server or in a Milvus Lite file."""

    def __init__(self, target: RemoteTarget, client: Any) -> None:
        self.target = target
        self.client = client
        self.name = target.collection
        self._loaded = False

    @classmethod
    def connect(cls, target: RemoteTarget, *, create: bool = False) -> MilvusCollection:
        """A client of `target`; a Milvus Lite path is checked first, and created only if `create`."""
        pymilvus = import_pymilvus()
        if target.is_local_file:
            check_lite_path(target.uri, create=create)
            uri, token = target.uri, ""
        else:
            uri, token = "http://" + target.uri.split("://", 1)[1].rstrip("/"), target.token
        hint = " (is the server up, the address right, the token valid?)"
        with calls(target, "connecting", InputError, hint):
            client = pymilvus.MilvusClient(uri=uri, token=token, timeout=CONNECT_TIMEOUT)
            client.list_collections()  # a wrong token fails here, not at the first search
        return cls(target, client)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    # --- the collection ---------------------------------------------------------------------------

    def exists(self) -> bool:
        with calls(self.target, "listing collections", InputError):
            return bool(self.client.has_collection(self.name))

    def create(self, dim: int, record: PushRecord, dense_index: str = "FLAT") -> None:
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        if dense_index not in DENSE_INDEXES:
            raise InputError(f"unknown dense index {dense_index!r}: use {', '.join(DENSE_INDEXES)}")
        schema = MilvusClient.create_schema(auto_id=False, description="embedkit index (see embedkit.push)")
        schema.add_field("row", DataType.INT64, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=MAX_VARCHAR)
        schema.add_field("title", DataType.VARCHAR, max_length=MAX_VARCHAR)
        schema.add_field(
            "body", DataType.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True, analyzer_params=ANALYZER
        )
        schema.add_field("metadata", DataType.JSON)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_function(
            Function(
                name="bm25",
                function_type=FunctionType.BM25,
                input_field_names=["body"],
                output_field_names=["sparse"],
            )
        )
        indexes = self.client.prepare_index_params()
        indexes.add_index(
            "dense", index_type=dense_index, metric_type="IP", params=DENSE_INDEXES[dense_index]
        )
        indexes.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params=BM25)
        with calls(self.target, "creating the collection"):
            self.client.create_collection(
                self.name,
                schema=schema,
                index_params=indexes,
                consistency_level="Strong",  # a search right after a push sees all of it
                properties={RECORD_PROPERTY: json.dumps(record.to_json())},
            )
        self._loaded = True

    def _describe(self) -> dict[str, Any]:
        with calls(self.target, "reading the collection", InputError):
            return self.client.describe_collection(self.name)

    def dim(self) -> int:
        for field in self._describe().get("fields", []):
            if field.get("name") == "dense":
                return int(field.get("params", {}).get("dim", 0))
        raise InputError(f"{self.target} is not an embedkit collection: it has no 'dense' vector field")

    def read_record(self) -> PushRecord | None:
        raw = (self._describe().get("properties") or {}).get(RECORD_PROPERTY)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        return PushRecord.from_json(data, str(self.target))

    def write_record(self, record: PushRecord) -> None:
        with calls(self.target, "writing the push record"):
            self.client.alter_collection_properties(
                self.name, properties={RECORD_PROPERTY: json.dumps(record.to_json())}
            )

    def _load(self) -> None:
        if not self._loaded:
            with calls(self.target, "loading the collection", InputError):
                self.client.load_collection(self.name)
            self._loaded = True

    def count(self) -> int:
        self._load()
        with calls(self.target, "counting"):
            result = self.client.query(self.name, filter="", output_fields=["count(*)"])
        return int(result[0]["count(*)"])

    def rows_present(self, start: int, stop: int) -> set[int]:
        self._load()
        found: set[int] = set()
        for first in range(start, stop, QUERY_BATCH):
            last = min(stop, first + QUERY_BATCH)
            with calls(self.target, "reading rows"):
                rows = self.client.query(
                    self.name,
                    filter=f"row >= {first} and row < {last}",
                    output_fields=["row"],
                    limit=last - first,
                )
            found.update(int(r["row"]) for r in rows)
        return found

    # --- writing ----------------------------------------------------------------------------------

    def upsert(self, rows: list[int], documents: list[Document], vectors: np.ndarray) -> None:
        """Documents at `rows` with their vectors; a row already there is replaced."""
        entities = []
        for row, doc, vector in zip(rows, documents, vectors, strict=True):
            body = body_of(doc)
            if len(body.encode("utf-8")) > MAX_VARCHAR:
                raise InputError(
                    f"document {doc.id!r} holds {len(body.encode('utf-8')):,} bytes of title and text; "
                    f"a Milvus VARCHAR holds {MAX_VARCHAR:,}: split or shorten it"
                )
            entities.append(
                {
                    "row": int(row),
                    "doc_id": str(doc.id),
                    "title": doc.title or "",
                    "body": body,
                    "metadata": doc.metadata or {},
                    "dense": np.asarray(vector, dtype=np.float32).tolist(),
                }
            )
        with calls(self.target, f"writing rows {rows[0]}..{rows[-1]}" if rows else "writing"):
            self.client.upsert(self.name, entities)

    def delete(self, rows: list[int]) -> None:
        """Remove the entities of `rows` (documents the index deleted or replaced)."""
        for first in range(0, len(rows), QUERY_BATCH):
            part = [int(r) for r in rows[first : first + QUERY_BATCH]]
            with calls(self.target, f"deleting rows {part[0]}..{part[-1]}"):
                self.client.delete(self.name, ids=part)

    def flush(self) -> None:
        """Seal what was written into segments (Milvus Lite otherwise rescans its memtable per search)."""
        with calls(self.target, "flushing"):
            self.client.flush(self.name)

    # --- reading and searching --------------------------------------------------------------------

    def search_dense(self, vectors: np.ndarray, k: int, where: str = "") -> list[list[tuple[int, float]]]:
        """Each vector's best `k` rows among those passing `where` (`milvus_filter`'s expression)."""
        self._load()
        params: dict[str, Any] = {"metric_type": "IP"}
        if "HNSW" in self._index_types():
            params["params"] = {"ef": max(k, HNSW_EF)}
        found: list[list[tuple[int, float]]] = []
        for first in range(0, len(vectors), QUERY_BATCH):
            block = np.asarray(vectors[first : first + QUERY_BATCH], dtype=np.float32).tolist()
            with calls(self.target, "dense search"):
                results = self.client.search(
                    self.name,
                    data=block,
                    anns_field="dense",
                    limit=k,
                    filter=where,
                    search_params=params,
                    output_fields=[],
                )
            found += [[(int(hit["row"]), float(hit["distance"])) for hit in hits] for hits in results]
        return found

    def _index_types(self) -> set[str]:
        with calls(self.target, "reading the indexes", InputError):
            described = self.client.describe_index(self.name, index_name="dense") or {}
        return {str(described.get("index_type", ""))}

    def search_lexical(self, texts: list[str], k: int, where: str = "") -> list[list[tuple[int, float]]]:
        self._load()
        found: list[list[tuple[int, float]]] = []
        for first in range(0, len(texts), QUERY_BATCH):
            block = texts[first : first + QUERY_BATCH]
            with calls(self.target, "BM25 search"):
                results = self.client.search(
                    self.name,
                    data=block,
                    anns_field="sparse",
                    limit=k,
                    filter=where,
                    search_params={"metric_type": "BM25"},
                    output_fields=[],
                )
            # abs: Milvus Lite reports BM25 as a negative distance, a server as the score itself
            found += [[(int(hit["row"]), abs(float(hit["distance"]))) for hit in hits] for hits in results]
        return found

    def _query_rows(self, rows: list[int], fields: list[str]) -> dict[int, dict[str, Any]]:
        self._load()
        found: dict[int, dict[str, Any]] = {}
        unique = list(dict.fromkeys(int(r) for r in rows))
        for first in range(0, len(unique), QUERY_BATCH):
            with calls(self.target, "reading documents"):
                entities = self.client.query(
                    self.name, ids=unique[first : first + QUERY_BATCH], output_fields=fields
                )
            found.update((int(e["row"]), e) for e in entities)
        return found

    def documents(self, rows: list[int]) -> dict[int, Document]:
        from embedkit.data.corpus import Document

        found = {}
        for row, e in self._query_rows(rows, _DOC_FIELDS).items():
            title, body = e["title"], e["body"]
            text = body[len(title) + 1 :] if title else body
            found[row] = Document(id=e["doc_id"], text=text, title=title, metadata=e.get("metadata") or {})
        return found

    def vectors(self, rows: list[int]) -> np.ndarray:
        found = self._query_rows(rows, ["dense"])
        missing = [r for r in rows if int(r) not in found]
        if missing:
            raise InputError(f"{self.target} holds no row {missing[0]}: push the index again")
        return np.asarray([found[int(r)]["dense"] for r in rows], dtype=np.float32).reshape(len(rows), -1)

    def rows_of_ids(self, ids: list[str]) -> dict[str, int]:
        self._load()
        found: dict[str, int] = {}
        unique = list(dict.fromkeys(str(i) for i in ids))
        for first in range(0, len(unique), QUERY_BATCH):
            part = unique[first : first + QUERY_BATCH]
            with calls(self.target, "reading document ids"):
                entities = self.client.query(
                    self.name,
                    # ids as a JSON list literal: Milvus Lite takes no filter templates (`{ids}`)
                    filter=f"doc_id in {json.dumps(part, ensure_ascii=False)}",
                    output_fields=["row", "doc_id"],
                    limit=len(part),
                )
            found.update((e["doc_id"], int(e["row"])) for e in entities)
        return found


def milvus_filter(expr: Expr, negated: bool = False) -> str:
    """A `--where` tree (`embedkit.index.where`) as a Milvus boolean expression over `metadata`.

    Milvus compares JSON values with SQL's three-valued logic, as the local filter does; `in` is
    written as `==` alternatives (Milvus Lite takes `in` on fields only). Dates compare as text
    there: the same answers as locally where the documents' dates share the literal's ISO format.
    `contains` is Milvus's `json_contains`, which is false, not unknown, where the field is no
    list: the same answers as locally except under a `not` (`negated`: an odd number of them
    above), where it is refused rather than answered otherwise.
    """
    from embedkit.index.where import And, Compare, Contains, Member, Not

    if isinstance(expr, Not):
        if expr.untrue:  # Milvus has no IS NOT TRUE: its `not` would leave out what this keeps
            raise InputError("where: `(...) is not true` is not run on Milvus: use not (...)")
        return f"not ({milvus_filter(expr.part, not negated)})"
    if isinstance(expr, Contains):
        if negated:
            raise InputError(
                f"where: `not` over contains (position {expr.position}) is not run on Milvus: its "
                "json_contains is false, not unknown, for a document whose field is no list"
            )
        field = json.dumps(expr.field, ensure_ascii=False)
        return f"json_contains(metadata[{field}], {_milvus_literal(expr.value)})"
    if isinstance(expr, Member):
        alternatives = [milvus_filter(Compare(expr.field, "=", v, expr.position)) for v in expr.values]
        return "(" + " or ".join(alternatives) + ")"
    if not isinstance(expr, Compare):
        joiner = " and " if isinstance(expr, And) else " or "
        return "(" + joiner.join(milvus_filter(part, negated) for part in expr.parts) + ")"
    op = "==" if expr.op == "=" else expr.op
    return f"metadata[{json.dumps(expr.field, ensure_ascii=False)}] {op} {_milvus_literal(expr.value)}"


def _milvus_literal(value: Any) -> str:
    """A filter's literal as Milvus writes it."""
    from embedkit.index.where import Date

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)  # exact: Milvus holds 64-bit integers, as the filter's parser does
    if isinstance(value, (float, Decimal)):
        return repr(float(value))  # a fraction compares as a float there
    return json.dumps(value.text if isinstance(value, Date) else value, ensure_ascii=False)
