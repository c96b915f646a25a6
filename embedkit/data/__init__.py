"""Reading what users hand in: text files, corpora of documents, STS pairs and BEIR folders.

The first stage of the data's way: `textfiles` decodes lines, CSV rows and JSON lines (gzipped or
not) with line numbers in every error; `corpus` turns them into documents and training sentences
(`sentences` splits documents); `sts` and `beir` read evaluation sets. No torch, no model here.
"""

from embedkit.data.beir import BeirData, read_beir
from embedkit.data.corpus import Document, load_sentences, read_documents
from embedkit.data.sentences import split_into_sentences
from embedkit.data.sts import StsData, read_sts

__all__ = [
    "BeirData",
    "Document",
    "StsData",
    "load_sentences",
    "read_beir",
    "read_documents",
    "read_sts",
    "split_into_sentences",
]
