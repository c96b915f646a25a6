"""A document's content hash: what tells a sync (`embedkit index --sync`) that a document read again
is unchanged, so its vector is kept and nothing is embedded.

As LangChain's indexing API hashes a document's page content and metadata for its record manager,
the hash covers what the index stores of a document: title, text and metadata (as JSON with sorted
keys, so that the order of a record's fields is no change). The id is the key it is stored under
(`embedkit.index.docstore`), not part of the hash. Only hashlib and json.
"""

from __future__ import annotations

import hashlib
import json

from embedkit.data.document import Document


def stored_metadata(doc: Document) -> str | None:
    """A document's metadata as the store keeps it (JSON; None for none)."""
    return json.dumps(doc.metadata, ensure_ascii=False, default=str) if doc.metadata else None


def hash_fields(title: str, text: str, metadata: str | None) -> str:
    """The hash of a document's stored fields: SHA-256 of title, text and metadata (its JSON with
    sorted keys, so that the order of a record's fields is no change), 32 hex digits."""
    fields = json.dumps(json.loads(metadata), ensure_ascii=False, sort_keys=True) if metadata else ""
    data = "\x00".join((title or "", text, fields)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:32]


def content_hash(doc: Document) -> str:
    """What a document's `content_hash` is once stored: the same for a document read again unchanged."""
    return hash_fields(doc.title or "", doc.text, stored_metadata(doc))
