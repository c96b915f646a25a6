"""A live index version's files copied into a staging folder, and a FAISS index written there.

Shared by every writer of a new version (build and append, delete, compact, builds from part
files), so that none of them imports another.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from embedkit.index.docstore import DocStore
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, index_files_dir, read_faiss
from embedkit.index.kinds import FaissIndex, faiss_module
from embedkit.index.lexical import LEXICAL_DIR, LexicalIndex, LexicalSettings, is_current_format
from embedkit.index.lexical_rebuild import fill_lexical
from embedkit.index.quantized import FULL_VECTORS, is_binary


def read_faiss_copy(out: Path, tmp: Path, meta: dict[str, Any]) -> FaissIndex:
    """The live version's FAISS index (and a quantized index's float vectors), copied into the
    staging folder `tmp` and read from there."""
    shutil.copy2(index_files_dir(out) / INDEX_FILE, tmp / INDEX_FILE)
    if (index_files_dir(out) / FULL_VECTORS).is_file():  # a quantized index's float vectors
        shutil.copy2(index_files_dir(out) / FULL_VECTORS, tmp / FULL_VECTORS)
    return read_faiss(tmp / INDEX_FILE, meta)


def copy_store(out: Path, tmp: Path, meta: dict[str, Any]) -> DocStore:
    """The live version's document store and lexical side, copied into `tmp` and opened for writing.

    An index whose lexical side an earlier embedkit wrote (postings in SQLite) gets the tantivy
    side here, built from its documents, so an append also upgrades it.
    """
    live = index_files_dir(out)
    shutil.copy2(live / DOCS_FILE, tmp / DOCS_FILE)
    recorded = meta.get("lexical")
    if recorded is None:
        return DocStore.open(tmp / DOCS_FILE, writable=True)
    if not is_current_format(recorded):
        store = DocStore.open(tmp / DOCS_FILE, writable=True)
        fill_lexical(store)
        return store
    settings = LexicalSettings.from_json(recorded)
    LexicalIndex.copy_folder(live / LEXICAL_DIR, tmp / LEXICAL_DIR)
    return DocStore.open(tmp / DOCS_FILE, writable=True, lexical=settings)


def write_faiss(index: FaissIndex, path: Path) -> int:
    """Write a CPU index to `path`; its size in bytes (recorded, and checked on load)."""
    faiss = faiss_module()
    (faiss.write_index_binary if is_binary(index) else faiss.write_index)(index, str(path))
    return path.stat().st_size
