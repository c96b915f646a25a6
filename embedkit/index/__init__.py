"""Vectors to a searchable index folder: FAISS vectors, a SQLite document store, metadata.

`folder` knows the files and checks them, `kinds` the FAISS index kinds, `docstore` the documents,
`build` writes or appends to a folder atomically, `from_vectors` builds one from part files
without embedding, `search` opens one for search.
"""

from embedkit.index.build import IndexReport, build_index
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, check_model_for, read_index_meta
from embedkit.index.from_vectors import build_index_from_vectors
from embedkit.index.kinds import (
    AUTO_FLAT_MAX,
    HNSW_EF_CONSTRUCTION,
    HNSW_EF_SEARCH,
    HNSW_M,
    IVF_NPROBE,
    IVF_PQ_MIN_DOCS,
    KINDS,
    PQ_DIMS_PER_BYTE,
    choose_kind,
    index_params,
    new_faiss_index,
)
from embedkit.index.search import Hit, SearchIndex, open_index_for

__all__ = [
    "AUTO_FLAT_MAX",
    "DOCS_FILE",
    "HNSW_EF_CONSTRUCTION",
    "HNSW_EF_SEARCH",
    "HNSW_M",
    "INDEX_FILE",
    "IVF_NPROBE",
    "IVF_PQ_MIN_DOCS",
    "KINDS",
    "META_FILE",
    "PQ_DIMS_PER_BYTE",
    "Hit",
    "IndexReport",
    "SearchIndex",
    "build_index",
    "build_index_from_vectors",
    "check_model_for",
    "choose_kind",
    "index_params",
    "new_faiss_index",
    "open_index_for",
    "read_index_meta",
]
