"""The documents of an index, in SQLite beside the FAISS file.

One table, `documents(row INTEGER PRIMARY KEY, id TEXT UNIQUE, title, text, metadata)`: `row` is the
vector's position in the FAISS index (FAISS returns int64 positions; this table turns them into
document ids and texts), `metadata` is the corpus's extra fields as JSON. Search reads only the rows
it returns, so the corpus is never loaded into memory. Document ids are unique: adding an id that
is already present is an `InputError` (the whole build or append is then abandoned, see `build.py`).

An index built with a lexical side also holds the BM25 tables of `embedkit.index.lexical` in the same
file, written in the same transaction as the documents, so the two never drift apart.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from embedkit.data.corpus import Document
from embedkit.errors import InputError
from embedkit.index.lexical import (
    LexicalSettings,
    add_documents,
    create_lexical,
    has_lexical,
    index_document_table,
    read_settings,
    search_lexical,
)

_SCHEMA = """
CREATE TABLE documents (
    row INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT
)
"""
# SQLite caps the number of `?` parameters in one statement (32766 since 3.32); stay well below.
_MAX_PARAMS = 900


class DocStore:
    """Rows <-> documents, backed by one SQLite file."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path
        self.lexical: LexicalSettings | None = None  # the BM25 index's settings, when it has one
        try:
            if has_lexical(connection):
                self.lexical = read_settings(connection)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {path}: {exc}") from None

    def enable_lexical(self, settings: LexicalSettings | None = None) -> LexicalSettings:
        """Give this (new, empty) store a BM25 index; `add` then keeps it in step with the documents."""
        self.lexical = create_lexical(self._db, settings)
        if self.next_row():
            index_document_table(self._db)
        return self.lexical

    def search_lexical(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Each query's best `k` (row, BM25 score), on this one connection; `InputError` without BM25."""
        if self.lexical is None:
            raise InputError(f"{self.path.parent} has no lexical index")
        return search_lexical(self._db, queries, k, self.lexical)

    @classmethod
    def create(cls, path: str | Path) -> DocStore:
        """A new, empty store; `path` must not exist (builds write into a fresh temporary folder)."""
        path = Path(path)
        if path.exists():
            raise InputError(f"{path} already exists")
        db = sqlite3.connect(path)
        # The file lives in a temporary build folder that is renamed into place only when complete,
        # so SQLite's own crash journal would protect nothing and only slow the inserts down.
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute(_SCHEMA)
        return cls(db, path)

    @classmethod
    def open(cls, path: str | Path, *, writable: bool = False) -> DocStore:
        """Open an existing store; read-only unless `writable` (append works on a copy)."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"document store missing: {path}")
        try:
            if writable:
                db = sqlite3.connect(path)
                db.execute("PRAGMA journal_mode=OFF")
                db.execute("PRAGMA synchronous=OFF")
            else:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            db.execute("SELECT row, id, title, text, metadata FROM documents LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {path}: {exc}") from None
        return cls(db, path)

    def close(self) -> None:
        self._db.close()

    def commit(self) -> None:
        self._db.commit()

    def next_row(self) -> int:
        """One past the largest row (the table's rows are 0..n-1); O(log n) on the primary key."""
        try:
            (last,) = self._db.execute("SELECT MAX(row) FROM documents").fetchone()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {self.path}: {exc}") from None
        return 0 if last is None else int(last) + 1

    def add(self, first_row: int, documents: Sequence[Document]) -> None:
        """Store `documents` at rows first_row, first_row + 1, ...; a repeated id is an `InputError`."""
        records = [
            (
                first_row + i,
                str(doc.id),
                doc.title or "",
                doc.text,
                json.dumps(doc.metadata, ensure_ascii=False, default=str) if doc.metadata else None,
            )
            for i, doc in enumerate(documents)
        ]
        try:
            self._db.executemany("INSERT INTO documents VALUES (?, ?, ?, ?, ?)", records)
            if self.lexical is not None:  # the same transaction: both commit, or neither
                add_documents(self._db, first_row, documents)
        except sqlite3.IntegrityError:
            raise InputError(
                f"duplicate document id {self._first_duplicate(first_row, documents)!r}: "
                "ids in an index must be unique"
            ) from None

    def by_rows(self, rows: Sequence[int]) -> list[Document | None]:
        """Documents at FAISS positions `rows` (None where there is none), in the order asked."""
        found = self._select("row", [int(r) for r in rows])
        return [found.get(int(r)) for r in rows]

    def by_ids(self, ids: Sequence[str]) -> list[Document | None]:
        """Documents with ids `ids` (None where unknown), in the order asked."""
        found = self._select("id", [str(i) for i in ids])
        by_id = {doc.id: doc for doc in found.values()}
        return [by_id.get(str(i)) for i in ids]

    def ids_of_rows(self, rows: Sequence[int]) -> dict[int, str]:
        """Row -> document id for the given rows; lighter than `by_rows` (no texts are read)."""
        unique = list(dict.fromkeys(int(r) for r in rows))
        found: dict[int, str] = {}
        for start in range(0, len(unique), _MAX_PARAMS):
            part = unique[start : start + _MAX_PARAMS]
            query = f"SELECT row, id FROM documents WHERE row IN ({','.join('?' * len(part))})"
            try:
                found.update((int(row), doc_id) for row, doc_id in self._db.execute(query, part))
            except sqlite3.DatabaseError as exc:
                raise InputError(f"corrupt document store {self.path}: {exc}") from None
        return found

    def _select(self, key: str, values: list[int] | list[str]) -> dict[int, Document]:
        found: dict[int, Document] = {}
        unique = list(dict.fromkeys(values))
        for start in range(0, len(unique), _MAX_PARAMS):
            part = unique[start : start + _MAX_PARAMS]
            marks = ",".join("?" * len(part))
            query = f"SELECT row, id, title, text, metadata FROM documents WHERE {key} IN ({marks})"
            try:
                rows = self._db.execute(query, part).fetchall()
            except sqlite3.DatabaseError as exc:
                raise InputError(f"corrupt document store {self.path}: {exc}") from None
            for row, doc_id, title, text, metadata in rows:
                found[int(row)] = Document(
                    id=doc_id, text=text, title=title, metadata=json.loads(metadata) if metadata else {}
                )
        return found

    def _first_duplicate(self, first_row: int, documents: Sequence[Document]) -> str:
        counts = Counter(str(doc.id) for doc in documents)
        for doc in documents:
            doc_id = str(doc.id)
            # rows >= first_row may hold this very batch, inserted before the failing record
            query = "SELECT 1 FROM documents WHERE id = ? AND row < ?"
            if counts[doc_id] > 1 or self._db.execute(query, (doc_id, first_row)).fetchone() is not None:
                return doc_id
        return "?"
