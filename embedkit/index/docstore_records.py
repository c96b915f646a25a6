"""The SQLite side of a document store (`embedkit.index.docstore`): its tables, the connection a
writer holds, and the records written for documents and passages.

Apart from `DocStore`, which answers questions about rows and ids, because this is the file's
format: what a new store's tables are, what one row of each holds, and how a store written by an
earlier version is brought up to date when it is opened for writing. Each document's record
carries its `content_hash` (`embedkit.index.content_hash`); a store written before the column
existed gains it here, its earlier rows holding NULL (their hash is computed from their fields,
the same value, so such an index syncs without embedding its documents again).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embedkit.data.document import Document, Passage
from embedkit.errors import InputError
from embedkit.index.content_hash import hash_fields, stored_metadata

SCHEMA = """
CREATE TABLE documents (
    row INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    metadata TEXT,
    content_hash TEXT
)
"""
PASSAGES_SCHEMA = (
    "CREATE TABLE passages (row INTEGER PRIMARY KEY, document INTEGER NOT NULL, "
    "start INTEGER NOT NULL, end INTEGER NOT NULL)",
    "CREATE INDEX passages_document ON passages(document)",
)
INSERT = "INSERT INTO documents (row, id, title, text, metadata, content_hash) VALUES (?, ?, ?, ?, ?, ?)"
INSERT_PASSAGES = "INSERT INTO passages VALUES (?, ?, ?, ?)"


def staged(path: Path) -> sqlite3.Connection:
    """A connection to a store in a staging folder, renamed into place only when complete: SQLite's
    own crash journal would protect nothing there, and only slow the inserts down."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    return db


def has_hash_column(db: sqlite3.Connection) -> bool:
    """Whether the store's documents have the `content_hash` column (earlier versions wrote none)."""
    return any(name == "content_hash" for _, name, *_ in db.execute("PRAGMA table_info(documents)"))


def add_hash_column(db: sqlite3.Connection) -> None:
    """Give a store written before `content_hash` existed the column (its rows hold NULL)."""
    if not has_hash_column(db):
        db.execute("ALTER TABLE documents ADD COLUMN content_hash TEXT")


def document_records(first_row: int, documents: Sequence[Document]) -> list[tuple[Any, ...]]:
    """`documents` table records of `documents` at rows first_row, first_row + 1, ..."""
    records = []
    for i, doc in enumerate(documents):
        metadata = stored_metadata(doc)
        title = doc.title or ""
        digest = hash_fields(title, doc.text, metadata)
        records.append((first_row + i, str(doc.id), title, doc.text, metadata, digest))
    return records


def passage_records(
    first_row: int, first_document: int, passages: Sequence[Passage]
) -> tuple[list[Document], list[tuple[int, int, int, int]]]:
    """The documents that `passages` (at vector rows first_row, ...) begin, to be numbered from
    `first_document`, and the passages' `passages` table records."""
    documents: list[Document] = []
    spans = []
    next_document = first_document
    for i, passage in enumerate(passages):
        if passage.number == 0:
            documents.append(passage.document)
            next_document += 1
        elif next_document == 0:
            raise InputError("a document's passages must start with its first")
        spans.append((first_row + i, next_document - 1, passage.start, passage.end))
    return documents, spans


def duplicate_id(
    db: sqlite3.Connection, first_row: int, first_added: int | None, documents: Sequence[Document]
) -> InputError:
    """The error for a repeated id in `documents` (stored from `first_row` on), saying whether the
    index held it before this writer's first row `first_added`, or the corpus gives it twice."""
    doc_id = _first_duplicate(db, first_row, documents)
    held = "SELECT 1 FROM documents WHERE id = ? AND row < ?"
    if db.execute(held, (doc_id, first_added)).fetchone() is not None:
        reason = "the index holds it already; `--append --upsert` replaces documents by id"
    else:
        reason = "the corpus gives it twice, and ids in an index must be unique"
    return InputError(f"duplicate document id {doc_id!r}: {reason}")


def _first_duplicate(db: sqlite3.Connection, first_row: int, documents: Sequence[Document]) -> str:
    """The first id of `documents` (stored from `first_row` on) given twice or held already."""
    counts = Counter(str(doc.id) for doc in documents)
    for doc in documents:
        doc_id = str(doc.id)
        # rows >= first_row may hold this very batch, inserted before the failing record
        query = "SELECT 1 FROM documents WHERE id = ? AND row < ?"
        if counts[doc_id] > 1 or db.execute(query, (doc_id, first_row)).fetchone() is not None:
            return doc_id
    return "?"
