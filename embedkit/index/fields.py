"""Which metadata fields an index's documents hold, and of which JSON types: what `--where` checks.

The types are `json_type`'s names (integer, real, text, true, false, null, array, object), with
"date" for text that starts as an ISO date (`ISO_DATE_GLOB`). A store written by this embedkit
keeps them in the table `metadata_fields(name, type)`, updated as documents are added (never as
they are deleted: a field no document holds any more only matches nothing), so reading them is
instant; an older store's are found by one scan of its metadata (SQLite's `json_each`).
`MetadataFilters` is a document store's part that keeps them and selects the rows a filter's SQL
(`embedkit.index.where`) passes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.index.store_errors import store_error

# Text that begins as an ISO date (YYYY-MM-DD): what `--where` compares as a date.
ISO_DATE_GLOB = "[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]*"
_ISO_DATE = re.compile(r"[0-9]{4}-[01][0-9]-[0-3][0-9]")
TABLE = "metadata_fields"
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (name TEXT NOT NULL, type TEXT NOT NULL, PRIMARY KEY (name, type))"
)


def json_kind(value: Any) -> str:
    """The type name SQLite's `json_type` gives `value` once stored as JSON (or "date")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "real"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "date" if _ISO_DATE.match(str(value)) else "text"  # anything else is stored as its text


def has_table(db: sqlite3.Connection) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return db.execute(query, (TABLE,)).fetchone() is not None


def note_fields(db: sqlite3.Connection, metadata: Iterable[dict[str, Any] | None]) -> None:
    """Record the fields and types of documents being added; the first time in a store written
    before the table existed, those of the documents it already holds too."""
    if not has_table(db):
        held = scan_fields(db)
        db.execute(_SCHEMA)
        db.executemany(
            f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?)", [(n, t) for n, ts in held.items() for t in ts]
        )
    pairs = {(str(name), json_kind(value)) for meta in metadata if meta for name, value in meta.items()}
    db.executemany(f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?)", sorted(pairs))


def read_fields(db: sqlite3.Connection) -> dict[str, set[str]]:
    """Each field's types: from the table, or by a scan of the documents where there is none."""
    if not has_table(db):
        return scan_fields(db)
    found: dict[str, set[str]] = {}
    for name, kind in db.execute(f"SELECT name, type FROM {TABLE}"):
        found.setdefault(name, set()).add(kind)
    return found


def scan_fields(db: sqlite3.Connection) -> dict[str, set[str]]:
    """The fields and types of every stored document's metadata (one pass over the table)."""
    query = (
        "SELECT DISTINCT key, CASE WHEN type = 'text' AND value GLOB ? THEN 'date' ELSE type END "
        "FROM documents, json_each(documents.metadata) WHERE documents.metadata IS NOT NULL"
    )
    found: dict[str, set[str]] = {}
    for name, kind in db.execute(query, (ISO_DATE_GLOB,)):
        found.setdefault(name, set()).add(kind)
    return found


class MetadataFilters:
    """A document store's metadata fields, and the rows whose documents pass a filter's SQL."""

    def __init__(self, connection: sqlite3.Connection, path: Path, passages: bool) -> None:
        self._db = connection
        self.path = path
        self.passages = passages  # rows are passages: a filter allows every passage of a document
        self._fields: dict[str, set[str]] | None = None  # read once, forgotten as documents are added

    def note(self, metadata: Iterable[dict[str, Any]]) -> None:
        """Record the fields of documents being added (`note_fields`)."""
        note_fields(self._db, metadata)
        self._fields = None

    def fields(self) -> dict[str, set[str]]:
        """Each top-level metadata field and the types of its values."""
        if self._fields is None:
            try:
                self._fields = read_fields(self._db)
            except sqlite3.DatabaseError as exc:
                raise store_error(exc, self.path) from None
        return self._fields

    def rows_matching(self, query: str, params: Sequence[object]) -> np.ndarray:
        """Vector rows of the documents the SELECT `query` gives (their `row`), sorted; in a
        store of passages every passage of each such document."""
        if self.passages:
            query = f"SELECT row FROM passages WHERE document IN ({query})"
        try:
            found = [r for (r,) in self._db.execute(f"{query} ORDER BY row", list(params))]
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, self.path) from None
        return np.asarray(found, dtype=np.int64)
