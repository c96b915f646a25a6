"""The deleted rows of a document store: which rows were deleted, and which of them still have a
vector in the FAISS file (masked until `embedkit compact`).

Rows are permanent keys (`embedkit.index.docstore`): a deleted row is never given again, so the
store remembers it in `deleted(row, masked)`, `masked` = 1 while its vector is still in the FAISS
file (an HNSW graph cannot lose nodes: `embedkit.index.rows`). The table is made by the first
deletion, so a store that never lost a document has none. A `DocStore` holds one `Deletions` over
its own SQLite connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedkit.index.store_errors import store_error

_SCHEMA = "CREATE TABLE IF NOT EXISTS deleted (row INTEGER PRIMARY KEY, masked INTEGER NOT NULL)"


class Deletions:
    """The `deleted` table of one SQLite document store."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self._db = connection
        self.path = path

    def any(self) -> bool:
        """Whether a document was ever deleted from this store (its rows then have gaps)."""
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deleted'"
        return self._db.execute(query).fetchone() is not None

    def masked_rows(self) -> np.ndarray:
        """Rows of deleted documents whose vectors are still in the FAISS file (sorted int64)."""
        if not self.any():
            return np.empty(0, np.int64)
        try:
            rows = self._db.execute("SELECT row FROM deleted WHERE masked = 1 ORDER BY row").fetchall()
        except sqlite3.DatabaseError as exc:
            raise store_error(exc, self.path) from None
        return np.asarray([r for (r,) in rows], dtype=np.int64)

    def last_row(self) -> int:
        """The largest row ever deleted (-1 if none)."""
        if not self.any():
            return -1
        (last,) = self._db.execute("SELECT MAX(row) FROM deleted").fetchone()
        return -1 if last is None else int(last)

    def record(self, rows: Sequence[int], masked: bool) -> None:
        """Remember `rows` as deleted (`masked`: their vectors stay in the FAISS file for now)."""
        self._db.execute(_SCHEMA)
        records = [(int(row), int(masked)) for row in rows]
        self._db.executemany("INSERT OR REPLACE INTO deleted VALUES (?, ?)", records)

    def unmask(self) -> None:
        """Record that no deleted row's vector is left in the FAISS file (after a compaction)."""
        if self.any():
            self._db.execute("UPDATE deleted SET masked = 0")
