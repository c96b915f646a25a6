"""Reading what users hand in: text files, corpora of documents, STS pairs and BEIR folders.

The first stage of the data's way: `textfiles` decodes lines, CSV rows and JSON lines (gzipped or
not) with line numbers in every error; `corpus` turns them into documents and training sentences
(`sentences` splits documents); `sts` and `beir` read evaluation sets. No torch, no model here.
"""

from embedkit.lazy import lazy_exports

# public name -> module that defines it, loaded on first use: a reader of one format (a search's
# query check, say) does not import the others (PDF, HTML, Markdown, BEIR)
_EXPORTS: dict[str, str] = {
    "BeirData": "embedkit.data.beir",
    "Document": "embedkit.data.corpus",
    "StsData": "embedkit.data.sts",
    "load_sentences": "embedkit.data.corpus",
    "read_beir": "embedkit.data.beir",
    "read_documents": "embedkit.data.corpus",
    "read_sts": "embedkit.data.sts",
    "split_into_sentences": "embedkit.data.sentences",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("embedkit.data", _EXPORTS, globals())
