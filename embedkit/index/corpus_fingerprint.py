"""A corpus's fingerprint as an index records it (`embedkit.data.fingerprint`), and its readers.

`eval retrieval --index` checks, without reading the index's documents, that the index holds
exactly the BEIR folder's corpus (an index of another corpus would give wrong metrics).
"""

from __future__ import annotations

from embedkit.data.fingerprint import CorpusFingerprint, combined, document_hash

__all__ = ["CorpusFingerprint", "beir_corpus_fingerprint", "combined", "document_hash"]


def beir_corpus_fingerprint(corpus: dict[str, dict[str, str]]) -> str:
    """The fingerprint of a BEIR corpus as `embedkit index` reads it (blank documents are skipped)."""
    fingerprint = CorpusFingerprint()
    for doc_id, fields in corpus.items():
        title, text = fields.get("title", ""), fields.get("text", "")
        if text.strip() or title.strip():
            fingerprint.add_fields(doc_id, title, text)
    return fingerprint.hex
