"""The documents of an index, in SQLite beside the FAISS file.

One table, `documents(row INTEGER PRIMARY KEY, id TEXT UNIQUE, title, text, metadata)`: `row` is the
vector's position in the FAISS index (FAISS returns int64 positions; this table turns them into
document ids and texts), `metadata` is the corpus's extra fields as JSON. Search reads only the rows
it returns, so the corpus is never loaded into memory. Document ids are unique: adding an id that
is already present is an `InputError` (the whole build or append is then abandoned, see `build.py`).

An index built with a lexical side also holds a tantivy BM25 index (`embedkit.index.lexical`) in the
folder `lexical/` beside the SQLite file. Every `add` and `remove` goes to both and `commit` commits
both; they are written in a staging version folder that becomes live only when both are complete
(`embedkit.storage.versioned`), so the two never drift apart.

Rows are permanent keys: a deleted document's rows are never given to another document (a pushed
collection keys its entities by row). `deleted(row, masked)` remembers them, `masked` = 1 while the
vector is still in the FAISS file (an HNSW graph cannot lose nodes: `embedkit.index.rows`); the
table is made by the first `remove`, so a store that never lost a document has none. This class is
the one place that maps document ids to rows: `rows_by_id` gives every row of an id.

Earlier embedkit versions kept BM25 postings
in tables of the SQLite file (`LEGACY_LEXICAL_TABLES`); such a store opens with `legacy_lexical`
set, and `rebuild_lexical` gives it the tantivy side.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedkit.data.corpus import Document
from embedkit.errors import InputError
from embedkit.index.fields import note_fields, read_fields
from embedkit.index.lexical import LEXICAL_DIR, LexicalIndex, LexicalSettings

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
# The BM25 postings of embedkit before its lexical side moved to tantivy.
LEGACY_LEXICAL_TABLES = ("lexical_settings", "lexical_segments", "lexical_postings")
_REINDEX_BATCH = 10_000
_DELETED_SCHEMA = "CREATE TABLE IF NOT EXISTS deleted (row INTEGER PRIMARY KEY, masked INTEGER NOT NULL)"


class DocStore:
    """Rows <-> documents, backed by one SQLite file."""

    def __init__(
        self, connection: sqlite3.Connection, path: Path, lexical: LexicalSettings | None = None
    ) -> None:
        self._db = connection
        self.path = path
        self.lexical: LexicalIndex | None = None  # the BM25 side, when the index has one
        self._fields: dict[str, set[str]] | None = None  # `metadata_fields`, read once
        try:
            marks = ",".join("?" * len(LEGACY_LEXICAL_TABLES))
            query = f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
            self.legacy_lexical = connection.execute(query, LEGACY_LEXICAL_TABLES).fetchone()[0] > 0
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {path}: {exc}") from None
        if lexical is not None:
            self.lexical = LexicalIndex.open(self.lexical_dir, lexical)

    @property
    def lexical_dir(self) -> Path:
        return self.path.parent / LEXICAL_DIR

    def enable_lexical(
        self, settings: LexicalSettings | None = None, on_batch: Callable[[int], object] | None = None
    ) -> LexicalSettings:
        """Give this store a new BM25 side, filled from the documents it holds; `add` then keeps it in step.

        Run in a staging folder (a new build, or `rebuild_lexical`'s copy): it drops the tables of
        an earlier embedkit's lexical index from this file.
        """
        if self.lexical is not None or self.lexical_dir.exists():
            raise InputError(f"{self.path.parent} already holds a lexical index")
        for table in LEGACY_LEXICAL_TABLES:
            self._db.execute(f"DROP TABLE IF EXISTS {table}")
        self.legacy_lexical = False
        self.lexical = LexicalIndex.create(self.lexical_dir, settings)
        after = -1
        while True:  # rows ascending, with the gaps deleted documents left
            query = "SELECT row, title, text FROM documents WHERE row > ? ORDER BY row LIMIT ?"
            rows = self._db.execute(query, (after, _REINDEX_BATCH)).fetchall()
            if not rows:
                return self.lexical.settings
            documents = [Document("", text, title) for _, title, text in rows]
            self.lexical.add_rows([row for row, _, _ in rows], documents)
            after = rows[-1][0]
            if on_batch is not None:
                on_batch(len(rows))

    def vacuum(self) -> None:
        """Rewrite the SQLite file without its free pages (after dropping tables)."""
        self._db.execute("VACUUM")

    def search_lexical(
        self, queries: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> list[list[tuple[int, float]]]:
        """Each query's best `k` (row, BM25 score), among `allowed` rows if given (sorted);
        `InputError` without a lexical side."""
        if self.lexical is None:
            raise InputError(f"{self.path.parent} has no lexical index")
        return self.lexical.search(queries, k, allowed)

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
            if writable:
                db = sqlite3.connect(path)
                db.execute("PRAGMA journal_mode=OFF")
                db.execute("PRAGMA synchronous=OFF")
            else:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            db.execute("SELECT row, id, title, text, metadata FROM documents LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {path}: {exc}") from None
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
        """The row the next document gets: one past the largest row ever given (deleted ones too);
        O(log n) on the primary keys."""
        last = self._one("SELECT MAX(row) FROM documents")
        if self.has_deleted():
            last = max(-1 if last is None else last, self._one("SELECT MAX(row) FROM deleted") or -1)
        return 0 if last is None else int(last) + 1

    def count(self) -> int:
        """Rows held: documents not deleted (a table scan of the id index: call it once per load)."""
        return int(self._one("SELECT COUNT(*) FROM documents"))

    def masked_rows(self) -> np.ndarray:
        """Rows of deleted documents whose vectors are still in the FAISS file (sorted int64)."""
        if not self.has_deleted():
            return np.empty(0, np.int64)
        rows = self._db.execute("SELECT row FROM deleted WHERE masked = 1 ORDER BY row").fetchall()
        return np.asarray([r for (r,) in rows], dtype=np.int64)

    def rows_between(self, first: int, stop: int) -> list[int]:
        """The rows held in [first, stop), ascending (a push walks them in batches)."""
        query = "SELECT row FROM documents WHERE row >= ? AND row < ? ORDER BY row"
        return [int(r) for (r,) in self._db.execute(query, (first, stop))]

    def rows_by_id(self, ids: Sequence[str]) -> dict[str, list[int]]:
        """Every row of each of the documents `ids` that the store holds (unknown ids are absent)."""
        found: dict[str, list[int]] = {}
        unique = list(dict.fromkeys(str(i) for i in ids))
        for start in range(0, len(unique), _MAX_PARAMS):
            part = unique[start : start + _MAX_PARAMS]
            query = f"SELECT row, id FROM documents WHERE id IN ({','.join('?' * len(part))}) ORDER BY row"
            for row, doc_id in self._db.execute(query, part):
                found.setdefault(doc_id, []).append(int(row))
        return found

    def remove(self, rows: Sequence[int], masked: bool) -> None:
        """Delete the documents at `rows` here and on the lexical side; remember the rows as deleted
        (`masked`: their vectors stay in the FAISS file until it is compacted). Not committed."""
        wanted = sorted({int(r) for r in rows})
        self._db.execute(_DELETED_SCHEMA)
        for start in range(0, len(wanted), _MAX_PARAMS):
            part = wanted[start : start + _MAX_PARAMS]
            self._db.execute(f"DELETE FROM documents WHERE row IN ({','.join('?' * len(part))})", part)
        records = [(row, int(masked)) for row in wanted]
        self._db.executemany("INSERT OR REPLACE INTO deleted VALUES (?, ?)", records)
        if self.lexical is not None:
            self.lexical.remove(wanted)

    def unmask(self) -> None:
        """Record that no deleted row's vector is left in the FAISS file (after a compaction)."""
        if self.has_deleted():
            self._db.execute("UPDATE deleted SET masked = 0")

    def rows_where(self, sql: str, params: Sequence[object]) -> np.ndarray:
        """Rows whose documents satisfy the SQL condition `sql` (`embedkit.index.where`), sorted."""
        query = f"SELECT row FROM documents WHERE {sql} ORDER BY row"
        try:
            return np.asarray([r for (r,) in self._db.execute(query, list(params))], dtype=np.int64)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {self.path}: {exc}") from None

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

    def _one(self, query: str):  # -> the first column of the first row
        try:
            return self._db.execute(query).fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise InputError(f"corrupt document store {self.path}: {exc}") from None

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
            note_fields(self._db, (doc.metadata for doc in documents))  # what `--where` may name
            self._fields = None
            if self.lexical is not None:  # committed with the documents: both, or neither
                self.lexical.add_rows(range(first_row, first_row + len(documents)), documents)
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

    def rows_of_ids(self, ids: Sequence[str]) -> list[int]:
        """The rows of documents `ids`, in the order asked; an unknown id is an `InputError`."""
        rows = {doc.id: row for row, doc in self._select("id", [str(i) for i in ids]).items()}
        missing = [doc_id for doc_id in ids if str(doc_id) not in rows]
        if missing:
            raise InputError(f"no document {missing[0]!r} in {self.path}")
        return [rows[str(i)] for i in ids]

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
