"""Vectors to a searchable index folder: FAISS vectors, a SQLite document store, a tantivy BM25 side.

`folder` knows the files and checks them, `kinds` the FAISS index kinds, `docstore` the documents
(with its `deletions` and metadata `fields`), `lexical` the BM25 side, `where` metadata filters,
`passages` splits long documents, `edits` deletes and compacts, `local_store` is a folder as the
search pipeline reaches it (`embedkit.search`), `search` opens one for search (`SearchIndex`).
The names below load on first use, so that importing the package loads no faiss.
"""

from __future__ import annotations

from embedkit.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "IndexReport": "embedkit.index.build_report",
    "rebuild_lexical": "embedkit.index.lexical_rebuild",
    "DOCS_FILE": "embedkit.index.folder",
    "INDEX_FILE": "embedkit.index.folder",
    "META_FILE": "embedkit.index.folder",
    "check_model_for": "embedkit.index.folder",
    "read_index_meta": "embedkit.index.folder",
    **{
        name: "embedkit.index.kinds"
        for name in (
            "AUTO_FLAT_MAX",
            "HNSW_EF_CONSTRUCTION",
            "HNSW_EF_SEARCH",
            "HNSW_M",
            "IVF_NPROBE",
            "IVF_PQ_MIN_DOCS",
            "KINDS",
            "PQ_DIMS_PER_BYTE",
            "choose_kind",
            "index_params",
            "new_faiss_index",
        )
    },
    "Hit": "embedkit.search.hits",
    "SearchIndex": "embedkit.index.search",
    "hit_record": "embedkit.search.hits",
    "open_index_for": "embedkit.index.search",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("embedkit.index", _EXPORTS, globals())
