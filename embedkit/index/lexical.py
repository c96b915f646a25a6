"""A BM25 lexical index of an index's documents, stored in the document store's SQLite file.

The lexical side of hybrid search: the same documents as the dense index, keyed by the same `row`
(the FAISS position), ranked by Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance
Framework: BM25 and Beyond") with Lucene's IDF, as Anserini's BEIR baselines and bm25s's default use
(Kamphuis et al. 2020, "Which BM25 Do You Mean?"):

    score(D, Q) = sum over distinct query terms q found in D of
                  IDF(q) * f(q, D) * (k1 + 1) / (f(q, D) + k1 * (1 - b + b * |D| / avgdl))
    IDF(q)      = ln(1 + (N - n(q) + 0.5) / (n(q) + 0.5))

f(q, D): occurrences of q in D; |D|: D's length in terms after analysis; avgdl: the mean length;
N: documents indexed; n(q): documents holding q. k1 = 1.2, b = 0.75 are Lucene's BM25Similarity
defaults. Unlike Lucene, lengths are exact (Lucene stores them in one lossy byte), so scores may
differ from Lucene's in the third digit.

Analysis, the same for documents and queries: NFKC, casefold, split into words (runs of Unicode
letters, digits and combining marks, so Devanagari or Arabic words stay whole; each Han, Hiragana
or Katakana character is a word of its own, as Lucene's StandardTokenizer emits CJK ideographs, so
unsegmented Chinese still matches character by character), drop Lucene's English stopwords, stem
with Snowball's English (Porter2) stemmer (`snowballstemmer`, which uses PyStemmer when installed).

Why not SQLite FTS5 or bm25s (`benchmarks/lexical.py`, measured at 100k documents): FTS5 scores
every row an OR query matches, and queries of ordinary words match most rows, so its bm25() took
hundreds of ms per query; bm25s is fast but bakes IDF into its matrix, so every append re-indexes
the whole corpus. Here postings live in SQLite beside the documents (one transaction with them,
no other file), each append adds a segment, and a query reads only its terms' postings and scores
them with numpy.

Tables: `lexical_settings` (settings as JSON, document count, total length), `lexical_segments`
(per append: first row, count, document lengths) and `lexical_postings` (per term and segment:
rows as gaps and term frequencies, as little-endian unsigned integers of the narrowest width).
Query text is only ever a bound parameter: any text is a valid query, and one with no terms left
(empty, punctuation, stopwords only, emoji) returns no hits, so the caller falls back to dense.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from embedkit.errors import InputError
from embedkit.index.text_analysis import (  # noqa: F401 (the lexical index's public settings)
    FORMAT_VERSION,
    LUCENE_ENGLISH_STOPWORDS,
    STEMMERS,
    STOPWORD_LISTS,
    LexicalSettings,
    analyze,
    analyze_many,
)

# Segments beyond this are merged into one after an append, so a query reads few blobs per term.
MAX_SEGMENTS = 16
# SQLite builds before 3.32 allow 999 `?` parameters in one statement; stay below.
_MAX_PARAMS = 900
_SCHEMA = """
CREATE TABLE lexical_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE lexical_segments (
    segment INTEGER PRIMARY KEY, first_row INTEGER NOT NULL, count INTEGER NOT NULL, lengths BLOB NOT NULL
);
CREATE TABLE lexical_postings (
    term TEXT NOT NULL, segment INTEGER NOT NULL, df INTEGER NOT NULL, first_row INTEGER NOT NULL,
    gaps BLOB NOT NULL, tfs BLOB NOT NULL, PRIMARY KEY (term, segment)
) WITHOUT ROWID;
"""
_TABLES = ("lexical_settings", "lexical_segments", "lexical_postings")


class TextDocument(Protocol):
    title: str
    text: str


# --- the tables ----------------------------------------------------------------------------------


def has_lexical(db: sqlite3.Connection) -> bool:
    """Whether this document store holds a lexical index."""
    marks = ",".join("?" * len(_TABLES))
    query = f"SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
    return db.execute(query, _TABLES).fetchone()[0] == len(_TABLES)


def create_lexical(db: sqlite3.Connection, settings: LexicalSettings | None = None) -> LexicalSettings:
    """Create the (empty) lexical tables in `db`; an `InputError` if they exist. Commits nothing."""
    settings = settings or LexicalSettings()
    if has_lexical(db):
        raise InputError("the document store already holds a lexical index")
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    stored = json.dumps(settings.to_json(), sort_keys=True)
    db.executemany(
        "INSERT INTO lexical_settings VALUES (?, ?)",
        [("settings", stored), ("documents", "0"), ("length", "0")],
    )
    return settings


def drop_lexical(db: sqlite3.Connection) -> None:
    """Remove the lexical tables (to rebuild with other settings); nothing if they are absent."""
    for table in _TABLES:
        db.execute(f"DROP TABLE IF EXISTS {table}")


def _value(db: sqlite3.Connection, key: str) -> str:
    if not has_lexical(db):
        raise InputError("this index has no lexical index: rebuild it with one")
    try:
        found = db.execute("SELECT value FROM lexical_settings WHERE key = ?", (key,)).fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(f"corrupt lexical index: {exc}") from None
    if found is None:
        raise InputError(f"corrupt lexical index: lexical_settings has no {key!r}")
    return str(found[0])


def read_settings(db: sqlite3.Connection) -> LexicalSettings:
    """The settings the lexical index was built with; an `InputError` if there is none."""
    try:
        return LexicalSettings.from_json(json.loads(_value(db, "settings")))
    except json.JSONDecodeError as exc:
        raise InputError(f"corrupt lexical index settings: {exc}") from None


def lexical_next_row(db: sqlite3.Connection) -> int:
    """Documents indexed, which is one past the last row: rows are 0..n-1, as in `documents`."""
    return int(_value(db, "documents"))


def _pack(values: np.ndarray) -> bytes:
    """Non-negative integers as little-endian unsigned ints of the narrowest width that holds them."""
    top = int(values.max()) if values.size else 0
    width = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4 if top < 1 << 32 else 8
    return values.astype(f"<u{width}").tobytes()


def _pack_postings(rows: np.ndarray, tfs: np.ndarray) -> tuple[bytes, bytes]:
    """A term's ascending rows as gaps from the first (0 first), and its term frequencies."""
    return _pack(np.diff(rows, prepend=rows[0])), _pack(tfs)


def _narrow(blob: bytes, count: int) -> np.ndarray:
    """The integers of a `_pack` blob, read in place (read-only, stored width)."""
    return np.frombuffer(blob, dtype=f"<u{len(blob) // count}")


def _unpack(blob: bytes, count: int) -> np.ndarray:
    return _narrow(blob, count).astype(np.int64)


def _rows(gaps: bytes, count: int, first: int) -> np.ndarray:
    rows = np.cumsum(_narrow(gaps, count), dtype=np.int64)
    rows += first
    return rows


def add_documents(db: sqlite3.Connection, first_row: int, documents: Sequence[TextDocument]) -> None:
    """Index `documents` (title + " " + text) at rows first_row, first_row + 1, ... as one segment.

    Rows must continue the index (`first_row` = `lexical_next_row`), as FAISS positions do;
    anything else is an `InputError`. Nothing is committed: the caller commits with the documents.
    """
    settings = read_settings(db)
    expected = lexical_next_row(db)
    if first_row != expected:
        raise InputError(f"the lexical index holds rows 0..{expected - 1}; cannot add at row {first_row}")
    if not documents:
        return
    texts = [f"{doc.title or ''} {doc.text}" for doc in documents]
    lengths = np.zeros(len(texts), dtype=np.int64)
    postings: dict[str, tuple[list[int], list[int]]] = {}
    for offset, terms in enumerate(analyze_many(texts, settings)):
        lengths[offset] = len(terms)
        for term, tf in Counter(terms).items():
            rows, tfs = postings.setdefault(term, ([], []))
            rows.append(offset)
            tfs.append(tf)
    (segment,) = db.execute("SELECT COALESCE(MAX(segment), -1) + 1 FROM lexical_segments").fetchone()
    db.execute(
        "INSERT INTO lexical_segments VALUES (?, ?, ?, ?)", (segment, first_row, len(texts), _pack(lengths))
    )
    db.executemany(
        "INSERT INTO lexical_postings VALUES (?, ?, ?, ?, ?, ?)",
        (
            (term, segment, len(rows), first_row + rows[0], *_pack_postings(np.array(rows), np.array(tfs)))
            for term, (rows, tfs) in postings.items()
        ),
    )
    total = int(_value(db, "length")) + int(lengths.sum())
    db.executemany(
        "UPDATE lexical_settings SET value = ? WHERE key = ?",
        [(str(first_row + len(texts)), "documents"), (str(total), "length")],
    )
    if db.execute("SELECT COUNT(*) FROM lexical_segments").fetchone()[0] > MAX_SEGMENTS:
        optimize_lexical(db)


def optimize_lexical(db: sqlite3.Connection) -> None:
    """Merge all segments into one (queries then read one blob per term); scores do not change."""
    query = "SELECT first_row, count, lengths FROM lexical_segments ORDER BY segment"
    segments = db.execute(query).fetchall()
    if len(segments) <= 1:
        return
    lengths = np.concatenate([_unpack(blob, count) for _, count, blob in segments])
    db.execute("DROP TABLE IF EXISTS temp.lexical_merged")
    db.execute("CREATE TEMP TABLE lexical_merged (term, df, first_row, gaps, tfs)")
    current: str | None = None
    parts: list[tuple[np.ndarray, np.ndarray]] = []

    def flush() -> None:
        rows = np.concatenate([r for r, _ in parts])
        tfs = np.concatenate([t for _, t in parts])
        record = (current, len(rows), int(rows[0]), *_pack_postings(rows, tfs))
        db.execute("INSERT INTO lexical_merged VALUES (?, ?, ?, ?, ?)", record)

    # Segments hold ascending row ranges, so reading them in order keeps each term's rows sorted.
    query = "SELECT term, df, first_row, gaps, tfs FROM lexical_postings ORDER BY term, segment"
    for term, df, first, gaps, tfs in db.cursor().execute(query):
        if term != current and parts:
            flush()
            parts = []
        current = term
        parts.append((_rows(gaps, df, first), _unpack(tfs, df)))
    if parts:
        flush()
    db.execute("DELETE FROM lexical_postings")
    db.execute("INSERT INTO lexical_postings SELECT term, 0, df, first_row, gaps, tfs FROM lexical_merged")
    db.execute("DROP TABLE temp.lexical_merged")
    db.execute("DELETE FROM lexical_segments")
    db.execute("INSERT INTO lexical_segments VALUES (0, 0, ?, ?)", (len(lengths), _pack(lengths)))


def index_document_table(db: sqlite3.Connection, batch: int = 10_000) -> int:
    """Index the rows of `documents` not yet in the lexical index; returns how many were added.

    Gives an index built without a lexical side one (after `create_lexical`).
    """
    added = 0
    while True:
        first = lexical_next_row(db)
        rows = db.execute(
            "SELECT row, title, text FROM documents WHERE row >= ? ORDER BY row LIMIT ?", (first, batch)
        ).fetchall()
        if not rows:
            return added
        if rows[0][0] != first or rows[-1][0] != first + len(rows) - 1:
            raise InputError(f"the documents table's rows are not contiguous from row {first}")
        add_documents(db, first, [_Text(title, text) for _, title, text in rows])
        added += len(rows)


@dataclass(frozen=True)
class _Text:
    title: str
    text: str


# --- search --------------------------------------------------------------------------------------


def search_lexical(
    db: sqlite3.Connection, queries: Sequence[str], k: int, settings: LexicalSettings | None = None
) -> list[list[tuple[int, float]]]:
    """Each query's best `k` rows by BM25, as (row, score) with score > 0, best first.

    Equal scores are ordered by row, ascending. A query without terms, or whose terms no document
    holds, gets an empty list. `settings` saves reading them when the caller has them.
    """
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    settings = settings or read_settings(db)
    try:
        n = lexical_next_row(db)
        avgdl = int(_value(db, "length")) / n if n else 0.0
        segments = db.execute("SELECT count, lengths FROM lexical_segments ORDER BY segment").fetchall()
        lengths = np.concatenate([_unpack(blob, count) for count, blob in segments]) if segments else None
        # |D| / avgdl turned into BM25's length normaliser once for all queries.
        norm = settings.k1 * (1 - settings.b + settings.b * lengths / avgdl) if n and avgdl else None
        return [_search_one(db, terms, k, n, norm, settings) for terms in analyze_many(queries, settings)]
    except InputError:
        raise
    except (sqlite3.DatabaseError, ValueError, TypeError, ZeroDivisionError) as exc:  # unreadable blobs
        raise InputError(f"corrupt lexical index: {exc}") from None


def _search_one(
    db: sqlite3.Connection,
    terms: list[str],
    k: int,
    n: int,
    norm: np.ndarray | None,
    settings: LexicalSettings,
) -> list[tuple[int, float]]:
    unique = list(dict.fromkeys(terms))
    if not unique or norm is None:
        return []
    by_term: dict[str, list[tuple[int, int, bytes, bytes]]] = {}
    for start in range(0, len(unique), _MAX_PARAMS):
        part = unique[start : start + _MAX_PARAMS]
        marks = ",".join("?" * len(part))
        query = f"SELECT term, df, first_row, gaps, tfs FROM lexical_postings WHERE term IN ({marks})"
        for term, df, first, gaps, tfs in db.execute(query, part):
            by_term.setdefault(term, []).append((df, first, gaps, tfs))
    scores = np.zeros(n, dtype=np.float64)
    for blobs in by_term.values():
        rows = np.concatenate([_rows(gaps, df, first) for df, first, gaps, _ in blobs])
        tf = np.concatenate([_narrow(tfs, df) for df, _, _, tfs in blobs])
        idf = math.log(1 + (n - len(rows) + 0.5) / (len(rows) + 0.5))
        # idf * tf * (k1 + 1) / (tf + norm), in place: this loop is the cost of a query.
        weight = norm[rows]
        weight += tf
        np.divide(tf, weight, out=weight)
        weight *= idf * (settings.k1 + 1)
        scores[rows] += weight  # a term's rows are distinct, so each is added once
    found = np.flatnonzero(scores > 0)
    values = scores[found]
    if len(found) > k:  # keep every row tied with the k-th score, then order by (score, row)
        kth = np.partition(values, len(values) - k)[len(values) - k]
        found, values = found[values >= kth], values[values >= kth]
    order = np.lexsort((found, -values))[:k]
    return [(int(found[i]), float(values[i])) for i in order]
