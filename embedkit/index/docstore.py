"""The documents of an index, in SQLite beside the FAISS file.

One table, `documents(row INTEGER PRIMARY KEY, id TEXT UNIQUE, title, text, metadata)`: `row` is the
vector's position in the FAISS index (FAISS returns int64 positions; this table turns them into
document ids and texts), `metadata` is the corpus's extra fields as JSON. Search reads only the rows
it returns, so the corpus is never loaded into memory. Document ids are unique: adding an id that
is already present is an `InputError` (and the whole build or append is abandoned).

An index of passages (`embedkit.index.passages`) has one vector per passage: its store has a
second table, `passages(row INTEGER PRIMARY KEY, document, start, end)`, where `row` is the
vector's FAISS position, `document` the `documents.row` of its document (then a document number,
not a vector position) and `start:end` the passage's characters in the document's text. This
class is the one owner of the vector rows <-> document ids mapping, for both layouts: every
method taking or giving `rows` speaks of vector rows, and `rows_by_id` gives every row of a
document (all its passages), which is what a delete must remove.

Each document's `content_hash` (`embedkit.index.content_hash`) tells a sync (`embedkit index
--sync`) which documents of a corpus read again are unchanged. The tables, the records written
into them and the upgrade of a store an earlier version wrote are `embedkit.index.docstore_records`.

An index built with a lexical side also holds a tantivy BM25 index (`embedkit.index.lexical`) in
`lexical/` beside the SQLite file. `add`, `remove` and `commit` go to both, in a staging version
folder that becomes live only when both are complete (`embedkit.storage.versioned`).

Rows are permanent keys: a deleted document's rows are never given to another document (a pushed
collection keys its entities by row); the store's `deletions` (`embedkit.index.deletions`)
remember them. In a store of passages these are vector (passage) rows, and a document goes with
its last passage; only vector rows are permanent keys, a document number nothing refers to any
more may be given again. Its `filters` (`embedkit.index.fields`) know the metadata fields and
give the rows whose documents pass a filter.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from embedkit.data.document import Document, Passage, TextSpan
from embedkit.data.values import check_ids
from embedkit.errors import InputError
from embedkit.index import docstore_records as records
from embedkit.index.content_hash import hash_fields
from embedkit.index.deletions import Deletions
from embedkit.index.fields import MetadataFilters
from embedkit.index.lexical import LEXICAL_DIR, LexicalIndex, LexicalSettings
from embedkit.index.store_errors import store_error

MAX_PARAMS = 900  # SQLite's bound on the `?` of one statement is 999 in older builds
READ_BATCH = 10_000  # documents read at once when walking the whole store
# The BM25 postings earlier embedkit versions kept in the SQLite file: such a store opens with
# `legacy_lexical` set, and `embedkit.index.lexical_rebuild` gives it a tantivy side.
LEGACY_LEXICAL_TABLES = ("lexical_settings", "lexical_segments", "lexical_postings")


class DocStore:
    """Rows <-> documents, backed by one SQLite file."""

    def __init__(
        self, connection: sqlite3.Connection, path: Path, lexical: LexicalSettings | None = None
    ) -> None:
        self._db = connection
        self.path = path
        self.lexical: LexicalIndex | None = None  # the BM25 side, when the index has one
        self.deletions = Deletions(connection, path)  # the rows deleted, and those still masked
        self._first_added: int | None = None  # the first document row this writer added
        try:
            marks = ",".join("?" * len(LEGACY_LEXICAL_TABLES))
            query = f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
            self.legacy_lexical = connection.execute(query, LEGACY_LEXICAL_TABLES).fetchone()[0] > 0
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, path) from None
        if lexical is not None:
            self.lexical = LexicalIndex.open(self.lexical_dir, lexical)
        query = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'passages'"
        self.has_passages = connection.execute(query).fetchone()[0] > 0
        self.filters = MetadataFilters(connection, path, self.has_passages)
        self._next_document: int | None = None  # the next documents.row of a passage store

    @property
    def lexical_dir(self) -> Path:
        return self.path.parent / LEXICAL_DIR

    @classmethod
    def create(cls, path: str | Path, *, passages: bool = False) -> DocStore:
        """A new, empty store (of passages with `passages`); `path` must not exist (builds write
        into a fresh temporary folder)."""
        path = Path(path)
        if path.exists():
            raise InputError(f"{path} already exists")
        db = records.staged(path)
        db.execute(records.SCHEMA)
        for statement in records.PASSAGES_SCHEMA if passages else ():
            db.execute(statement)
        return cls(db, path)

    @classmethod
    def open(
        cls, path: str | Path, *, writable: bool = False, lexical: LexicalSettings | None = None
    ) -> DocStore:
        """Open an existing store, and its lexical side with `lexical` (the index's recorded settings).

        Read-only unless `writable` (an append works on a copy, lexical side included).
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"document store missing: {path}")
        try:
            db = (
                records.staged(path)
                if writable
                else sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            )
            db.execute("SELECT row, id, title, text, metadata FROM documents LIMIT 1").fetchall()
            if writable:
                records.add_hash_column(db)
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, path) from None
        try:
            return cls(db, path, lexical)
        except BaseException:
            db.close()
            raise

    def __enter__(self) -> DocStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()
        if self.lexical is not None:
            self.lexical.close()

    def commit(self) -> None:
        """Commit the documents, then the lexical side (one staging version holds both)."""
        self._db.commit()
        if self.lexical is not None:
            self.lexical.commit()

    def next_row(self) -> int:
        """The vector row the next document (or passage) gets: one past the largest row ever given
        (deleted ones too); O(log n) on the primary keys."""
        return max(self._max_row(self._vectors), self.deletions.last_row()) + 1

    @property
    def _vectors(self) -> str:
        """The table with one record per vector row."""
        return "passages" if self.has_passages else "documents"

    def count(self) -> int:
        """Vector rows held: documents (or passages) not deleted (a table scan: call it once per load)."""
        return int(self._one(f"SELECT COUNT(*) FROM {self._vectors}"))

    def document_count(self) -> int:
        """The documents held (as many as `count()`, unless the index holds passages)."""
        return int(self._one("SELECT COUNT(*) FROM documents"))

    def rows_between(self, first: int, stop: int) -> list[int]:
        """The vector rows held in [first, stop), ascending (a push walks them in batches)."""
        query = f"SELECT row FROM {self._vectors} WHERE row >= ? AND row < ? ORDER BY row"
        return [int(r) for (r,) in self._db.execute(query, (first, stop))]

    def _one(self, query: str) -> Any:  # the first column of the first row
        try:
            return self._db.execute(query).fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, self.path) from None

    def _max_row(self, table: str) -> int:
        try:
            (last,) = self._db.execute(f"SELECT MAX(row) FROM {table}").fetchone()
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, self.path) from None
        return -1 if last is None else int(last)

    def largest_number_id(self) -> int:
        """The largest id that is a plain number (0 if none): where a .txt file's line ids go on from."""
        query = "SELECT MAX(CAST(id AS INTEGER)) FROM documents WHERE id NOT GLOB '*[^0-9]*' AND id != ''"
        (largest,) = self._db.execute(query).fetchone()
        return int(largest or 0)

    def add(self, first_row: int, documents: Sequence[Document] | Sequence[Passage]) -> None:
        """Store `documents` at vector rows first_row, first_row + 1, ...; a repeated id is an `InputError`.

        A store of passages takes `Passage`s, a document's passages in order: its first passage
        (`number` 0) stores the document, every passage its own row.
        """
        if self.has_passages:
            passages = cast("Sequence[Passage]", documents)  # a store of passages is given passages
            first_document, whole, spans = self._passage_records(first_row, passages)
        else:
            first_document, whole, spans = first_row, list(cast("Sequence[Document]", documents)), []
        if self._first_added is None:
            self._first_added = first_document
        try:
            self._db.executemany(records.INSERT, records.document_records(first_document, whole))
            if spans:
                self._db.executemany(records.INSERT_PASSAGES, spans)
            self.filters.note([doc.metadata for doc in whole])  # what `--where` may name
            if self.lexical is not None:  # committed with the documents: both, or neither
                self.lexical.add_rows(range(first_row, first_row + len(documents)), documents)
        except sqlite3.IntegrityError:
            raise records.duplicate_id(self._db, first_document, self._first_added, whole) from None

    def _passage_records(
        self, first_row: int, passages: Sequence[Passage]
    ) -> tuple[int, list[Document], list[tuple[int, int, int, int]]]:
        """The documents that `passages` begin (numbered from the returned one) and the passages' records."""
        if passages and not isinstance(passages[0], Passage):
            raise InputError(f"{self.path} holds passages: add passages, not whole documents")
        if self._next_document is None:
            self._next_document = self._max_row("documents") + 1
        first_document = self._next_document
        documents, spans = records.passage_records(first_row, first_document, passages)
        self._next_document += len(documents)
        return first_document, documents, spans

    def by_rows(self, rows: Sequence[int]) -> list[Document | None]:
        """Documents at FAISS positions `rows` (None where there is none), in the order asked.

        In a store of passages, the document each row's passage belongs to.
        """
        if self.has_passages:
            found = {row: passage.document for row, passage in self.held_at(rows).items()}  # type: ignore[union-attr]
        else:
            found = self._select("row", [int(r) for r in rows])
        return [found.get(int(r)) for r in rows]

    def document_numbers(self, rows: Sequence[int]) -> dict[int, int]:
        """Row -> the number of its document (`documents.row`): the same for all passages of one."""
        if not self.has_passages:  # the rows held (a deleted document's row has none)
            sql = "SELECT row FROM documents WHERE row IN ({})"
            return {int(r): int(r) for (r,) in self._query_in(sql, [int(r) for r in rows])}
        return dict(self._query_in("SELECT row, document FROM passages WHERE row IN ({})", rows))

    def remove(self, rows: Sequence[int], masked: bool) -> None:
        """Delete what the vector `rows` hold here and on the lexical side; remember the rows as
        deleted (`masked`: their vectors stay in the FAISS file until it is compacted). In a store
        of passages, a document goes once none of its passages is left. Not committed."""
        wanted = sorted({int(r) for r in rows})
        documents = sorted(set(self.document_numbers(wanted).values())) if self.has_passages else []
        self._delete_in(self._vectors, wanted)
        if documents:  # those of the passages' documents with no passage left
            sql = "SELECT document FROM passages WHERE document IN ({})"
            held = {doc for (doc,) in self._query_in(sql, documents)}
            self._delete_in("documents", [doc for doc in documents if doc not in held])
        self.deletions.record(wanted, masked)
        if self.lexical is not None:
            self.lexical.remove(wanted)

    def _delete_in(self, table: str, rows: list[int]) -> None:
        for start in range(0, len(rows), MAX_PARAMS):
            part = rows[start : start + MAX_PARAMS]
            self._db.execute(f"DELETE FROM {table} WHERE row IN ({','.join('?' * len(part))})", part)

    def drop_legacy_lexical(self) -> None:
        """Drop an earlier embedkit's BM25 tables from this file (before a tantivy side is built)."""
        for table in LEGACY_LEXICAL_TABLES:
            self._db.execute(f"DROP TABLE IF EXISTS {table}")
        self.legacy_lexical = False

    def vacuum(self) -> None:
        """Rewrite the SQLite file without its free pages (after dropping tables)."""
        self._db.execute("VACUUM")

    def rows_by_id(self, ids: Sequence[str]) -> dict[str, list[int]]:
        """Every vector row of each document in `ids` (all its passages), ascending; unknown ids left out."""
        if self.has_passages:
            sql = (
                "SELECT d.id, p.row FROM documents d JOIN passages p ON p.document = d.row WHERE d.id IN ({})"
            )
        else:
            sql = "SELECT id, row FROM documents WHERE id IN ({})"
        found: dict[str, list[int]] = {}
        for doc_id, row in sorted(self._query_in(sql, check_ids(ids)), key=lambda pair: pair[1]):
            found.setdefault(doc_id, []).append(int(row))
        return found

    def content_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        """Id -> `content_hash` of the documents `ids` held (unknown ids left out); computed from
        the fields where the store predates the column."""
        hashed = records.has_hash_column(self._db)
        column = "content_hash" if hashed else "NULL"
        sql = f"SELECT id, {column}, title, text, metadata FROM documents WHERE id IN ({{}})"
        return {
            doc_id: stored or hash_fields(title, text, metadata)
            for doc_id, stored, title, text, metadata in self._query_in(sql, [str(i) for i in ids])
        }

    def ids(self) -> Iterator[str]:
        """Every document's id, in row order."""
        for (doc_id,) in self._db.execute("SELECT id FROM documents ORDER BY row"):
            yield doc_id

    def titles(self) -> Iterator[str]:
        """Every document's title, in row order (an empty one for a document without)."""
        for (title,) in self._db.execute("SELECT title FROM documents ORDER BY row"):
            yield title

    def iter_documents(self, batch: int = READ_BATCH) -> Iterator[Document]:
        """Every document once, in the order they were added (whatever the rows of their passages)."""
        first = 0
        last = self._max_row("documents")
        while first <= last:
            found = self._select("row", list(range(first, first + batch)))
            yield from (found[row] for row in sorted(found))
            first += batch

    def by_ids(self, ids: Sequence[str]) -> list[Document | None]:
        """Documents with ids `ids` (None where unknown), in the order asked."""
        wanted = check_ids(ids)  # SQLite cannot even encode an id with a lone surrogate
        found = self._select("id", wanted)
        by_id = {doc.id: doc for doc in found.values()}
        return [by_id.get(i) for i in wanted]

    def ids_of_rows(self, rows: Sequence[int]) -> dict[int, str]:
        """Row -> document id for the given rows; lighter than `by_rows` (no texts are read)."""
        if self.has_passages:
            sql = (
                "SELECT p.row, d.id FROM passages p JOIN documents d ON d.row = p.document "
                "WHERE p.row IN ({})"
            )
        else:
            sql = "SELECT row, id FROM documents WHERE row IN ({})"
        return {int(row): doc_id for row, doc_id in self._query_in(sql, [int(r) for r in rows])}

    def _query_in(self, sql: str, values: Sequence[int] | Sequence[str]) -> list[tuple[Any, ...]]:
        """`sql` with its `IN ({})` filled for `values`, in slices SQLite's parameter cap allows."""
        unique = list(dict.fromkeys(values))
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(unique), MAX_PARAMS):
            part = unique[start : start + MAX_PARAMS]
            try:
                found.extend(self._db.execute(sql.format(",".join("?" * len(part))), part).fetchall())
            except sqlite3.DatabaseError as exc:
                raise store_error(exc, self.path) from None
        return found

    def held_at(self, rows: Sequence[int]) -> dict[int, TextSpan]:
        """Row -> what the index holds there: the `Document`, or in a store of passages the `Passage`."""
        if not self.has_passages:
            return dict(self._select("row", [int(r) for r in rows]))
        sql = "SELECT row, document, start, end FROM passages WHERE row IN ({})"
        spans = self._query_in(sql, [int(r) for r in rows])
        documents = self._select("row", sorted({doc for _, doc, _, _ in spans}))
        found: dict[int, TextSpan] = {}
        for row, doc, start, end in spans:
            # the passage's number is not stored: 0 marks the document's first row, enough for readers
            found[int(row)] = Passage(documents[doc], 0 if start == 0 else 1, int(start), int(end))
        return found

    def _select(self, key: str, values: list[int] | list[str]) -> dict[int, Document]:
        """`documents.row` -> Document for the records whose `key` (row or id) is in `values`."""
        sql = f"SELECT row, id, title, text, metadata FROM documents WHERE {key} IN ({{}})"
        return {
            int(row): Document(
                id=doc_id, text=text, title=title, metadata=json.loads(metadata) if metadata else {}
            )
            for row, doc_id, title, text, metadata in self._query_in(sql, values)
        }
