"""Vectors to a searchable index folder: FAISS vectors, a SQLite document store, a tantivy BM25 side.

`folder` knows the files and checks them, `kinds` the FAISS index kinds, `docstore` the documents,
`lexical` the BM25 side, `fusion` hybrid ranking, `build` writes or appends to a folder atomically,
`from_vectors` builds one from part files without embedding, `search` opens one for search,
`passages` splits long documents and ranks them by their best passage, `hits` are the results.
The names below load on first use, so that the CLI can read `fusion`'s defaults without faiss.
"""

from __future__ import annotations

from embedkit.lazy import lazy_exports

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "IndexReport": "embedkit.index.build",
    "build_index": "embedkit.index.build",
    "rebuild_lexical": "embedkit.index.lexical_rebuild",
    "DOCS_FILE": "embedkit.index.folder",
    "INDEX_FILE": "embedkit.index.folder",
    "META_FILE": "embedkit.index.folder",
    "check_model_for": "embedkit.index.folder",
    "read_index_meta": "embedkit.index.folder",
    "build_index_from_vectors": "embedkit.index.from_vectors",
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
    "Hit": "embedkit.index.hits",
    "SearchIndex": "embedkit.index.search",
    "hit_record": "embedkit.index.hits",
    "open_index_for": "embedkit.index.search",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("embedkit.index", _EXPORTS, globals())
