"""What a `DocStore` knows of deletions and of metadata filters: the rows deleted (and those whose
vectors are still masked in the FAISS file until `embedkit compact`), removing a document on both
sides, and the rows whose documents pass a `--where` condition.

A mixin of `DocStore` (`docstore.py`), which owns the tables; kept apart so that each file holds
one concept. It uses the store's `_db`, `path`, `lexical`, `has_passages`, `_vectors`,
`documents_of_rows`, `_query_in` and `_fields`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np

from embedkit.errors import InputError
from embedkit.index.fields import read_fields

_MAX_PARAMS = 900  # SQLite's bound on the `?` of one statement is 999 in older builds
_DELETED_SCHEMA = "CREATE TABLE IF NOT EXISTS deleted (row INTEGER PRIMARY KEY, masked INTEGER NOT NULL)"


class DeletionsAndFilters:
    """Deleted rows and metadata filters of a document store (see the module's docstring)."""

    def masked_rows(self) -> np.ndarray:
        """Rows of deleted documents whose vectors are still in the FAISS file (sorted int64)."""
        if not self.has_deleted():
            return np.empty(0, np.int64)
        rows = self._db.execute("SELECT row FROM deleted WHERE masked = 1 ORDER BY row").fetchall()
        return np.asarray([r for (r,) in rows], dtype=np.int64)

    def remove(self, rows: Sequence[int], masked: bool) -> None:
        """Delete what the vector `rows` hold here and on the lexical side; remember the rows as
        deleted (`masked`: their vectors stay in the FAISS file until it is compacted). In a store
        of passages, a document goes once none of its passages is left. Not committed."""
        wanted = sorted({int(r) for r in rows})
        self._db.execute(_DELETED_SCHEMA)
        documents = sorted(set(self.documents_of_rows(wanted).values())) if self.has_passages else []
        self._delete_in(self._vectors, "row", wanted)
        if documents:  # those of the passages' documents with no passage left
            sql = "SELECT document FROM passages WHERE document IN ({})"
            held = {doc for (doc,) in self._query_in(sql, documents)}
            self._delete_in("documents", "row", [doc for doc in documents if doc not in held])
        records = [(row, int(masked)) for row in wanted]
        self._db.executemany("INSERT OR REPLACE INTO deleted VALUES (?, ?)", records)
        if self.lexical is not None:
            self.lexical.remove(wanted)

    def _delete_in(self, table: str, key: str, values: list[int]) -> None:
        for start in range(0, len(values), _MAX_PARAMS):
            part = values[start : start + _MAX_PARAMS]
            self._db.execute(f"DELETE FROM {table} WHERE {key} IN ({','.join('?' * len(part))})", part)

    def unmask(self) -> None:
        """Record that no deleted row's vector is left in the FAISS file (after a compaction)."""
        if self.has_deleted():
            self._db.execute("UPDATE deleted SET masked = 0")

    def rows_where(self, sql: str, params: Sequence[object]) -> np.ndarray:
        """Vector rows whose documents satisfy the SQL condition `sql` (`embedkit.index.where`),
        sorted; in a store of passages every passage of each such document."""
        query = f"SELECT row FROM documents WHERE {sql}"
        if self.has_passages:
            query = f"SELECT row FROM passages WHERE document IN ({query})"
        try:
            found = [r for (r,) in self._db.execute(f"{query} ORDER BY row", list(params))]
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {self.path}: {exc}") from None
        return np.asarray(found, dtype=np.int64)

    def metadata_fields(self) -> dict[str, set[str]]:
        """Each top-level metadata field and the types of its values (`embedkit.index.fields`)."""
        if self._fields is None:
            try:
                self._fields = read_fields(self._db)
            except sqlite3.DatabaseError as exc:
                raise InputError(f"corrupt document store {self.path}: {exc}") from None
        return self._fields

    def has_deleted(self) -> bool:
        """Whether a document was ever deleted from this store (its rows then have gaps)."""
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deleted'"
        return self._db.execute(query).fetchone() is not None
