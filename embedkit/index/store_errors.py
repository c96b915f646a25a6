"""What a failed SQLite call on a document store means, said once for every caller.

Only real damage is called corruption: SQLite's `SQLITE_CORRUPT` ("database disk image is
malformed") and `SQLITE_NOTADB` ("file is not a database"). A file without embedkit's tables is
named as such; a store another process holds locked, or one the system cannot read, is a failure
while running (exit 1), as is any other refusal (a statement SQLite cannot compile: the filter
compiler keeps its SQL within SQLite's limits, `embedkit.index.where_sql`, so none is expected).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from embedkit.errors import EmbedkitError, InputError, RunFailure

# SQLite's primary result codes (https://www.sqlite.org/rescode.html)
DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
UNREADABLE = {3, 7, 10, 14}  # SQLITE_PERM, SQLITE_NOMEM, SQLITE_IOERR, SQLITE_CANTOPEN
# Python 3.10's sqlite3 gives no result code: the messages of the damaged ones
DAMAGED_MESSAGES = ("malformed", "not a database")


def store_error(exc: sqlite3.Error, path: Path) -> EmbedkitError:
    """The error to raise for `exc`, met while reading or writing the document store `path`."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python's sqlite3 has it from 3.11; 3.10 has none
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary in DAMAGED or (primary is None and any(m in text for m in DAMAGED_MESSAGES)):
        return InputError(f"corrupt document store {path}: {text}")
    if "no such table" in text or "no such column" in text:
        return InputError(f"{path} is not a document store embedkit wrote ({text}): rebuild the index")
    if primary in BUSY:
        return RunFailure(f"the document store {path} is locked by another process ({text}): try again")
    if primary in UNREADABLE:
        return RunFailure(f"cannot read the document store {path}: {text}")
    return RunFailure(f"SQLite could not answer from the document store {path}: {text}")
