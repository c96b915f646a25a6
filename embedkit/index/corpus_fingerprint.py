"""A corpus's fingerprint as an index records it (`embedkit.data.fingerprint`), and its readers.

`eval retrieval --index` checks, without reading the index's documents, that the index holds
exactly the BEIR folder's corpus (an index of another corpus would give wrong metrics).
"""

from __future__ import annotations

from embedkit.data.fingerprint import CorpusFingerprint, combined, document_hash

__all__ = [
    "CorpusFingerprint",
    "beir_corpus_fingerprint",
    "combined",
    "count_and_fingerprint",
    "document_hash",
]


def beir_corpus_fingerprint(corpus: dict[str, dict[str, str]]) -> str:
    """The fingerprint of a BEIR corpus as `embedkit index` reads it (blank documents are skipped)."""
    fingerprint = CorpusFingerprint()
    for doc_id, fields in corpus.items():
        title, text = fields.get("title", ""), fields.get("text", "")
        if text.strip() or title.strip():
            fingerprint.add_fields(doc_id, title, text)
    return fingerprint.hex


def count_and_fingerprint(corpus, options, stats=None) -> tuple[int, str]:
    """`count_documents` and the corpus's fingerprint in one streaming pass (the blank documents
    skipped are counted in `stats`, a `ReadStats`)."""
    from embedkit.jobs.streaming import count_documents, read_corpus

    fingerprint = CorpusFingerprint()
    count = 0
    for doc in read_corpus(corpus, options, stats):
        fingerprint.add_fields(doc.id, doc.title, doc.text)
        count += 1
    if count == 0:
        count_documents(corpus, options)  # its one error for an empty corpus
    return count, fingerprint.hex
