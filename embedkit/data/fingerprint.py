"""A corpus's fingerprint: which documents a set of vectors or an index holds, in 32 hex digits.

Each document (id, title, text) hashes to a 128-bit number (SHA-256, truncated); the corpus's
fingerprint is their sum modulo 2**128. A sum does not depend on the order of the documents and
adds up over appends and parts, so an index built in several parts, or from part files embedded on
several machines, has the fingerprint of the whole corpus. Only hashlib: the embedding stage records
the fingerprint of each part it writes, the index stage checks it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_MOD = 1 << 128


def document_hash(doc_id: str, title: str, text: str) -> int:
    data = "\x00".join((str(doc_id), title or "", text)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(data).digest()[:16], "big")


class CorpusFingerprint:
    """Running fingerprint; `add` documents (anything with id, title, text), read `hex`."""

    def __init__(self, start: str | None = None) -> None:
        self.total = int(start, 16) if start else 0

    def add(self, documents: Iterable) -> None:
        for doc in documents:
            self.total = (self.total + document_hash(doc.id, doc.title, doc.text)) % _MOD

    def remove(self, documents: Iterable) -> None:
        """Take documents out again (the index deleted them): the sum's inverse."""
        for doc in documents:
            self.total = (self.total - document_hash(doc.id, doc.title, doc.text)) % _MOD

    def add_fields(self, doc_id: str, title: str, text: str) -> None:
        self.total = (self.total + document_hash(doc_id, title, text)) % _MOD

    @property
    def hex(self) -> str:
        return f"{self.total:032x}"


def combined(*fingerprints: str | None) -> str | None:
    """The fingerprint of the union of disjoint corpora; None if one is unknown (an older index)."""
    known = [f for f in fingerprints if f is not None]
    if len(known) < len(fingerprints):
        return None
    return f"{sum(int(f, 16) for f in known) % _MOD:032x}"
