"""Rebuilding an index's lexical (BM25) side from its own documents, without re-embedding."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from embedkit.index.build import IndexReport
from embedkit.index.docstore import DocStore
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, index_files_dir, read_index_meta
from embedkit.index.meta import IndexMeta
from embedkit.progress import ProgressBar
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.locking import locked
from embedkit.storage.versioned import new_version


@locked("out")
def rebuild_lexical(out: str | Path, *, progress: bool = False) -> IndexReport:
    """Give the index in `out` a new lexical side built from its documents, without re-embedding.

    For an index built with `--no-lexical`, or whose lexical side an earlier embedkit wrote. The
    vectors and documents are copied unchanged into a new version; a kill leaves the old one live.
    """
    out = Path(out)
    old = read_index_meta(out)
    start = time.perf_counter()
    with new_version(out) as tmp:
        shutil.copy2(index_files_dir(out) / INDEX_FILE, tmp / INDEX_FILE)
        shutil.copy2(index_files_dir(out) / DOCS_FILE, tmp / DOCS_FILE)
        store = DocStore.open(tmp / DOCS_FILE, writable=True)
        try:
            with ProgressBar(store.next_row(), "lexical", enabled=progress, rate_unit="docs/s") as bar:
                settings = store.enable_lexical(on_batch=bar.advance)
            store.commit()
            held = store.document_count()
            store.vacuum()  # the earlier embedkit's postings tables are dropped: give their pages back
        finally:
            store.close()
        meta = IndexMeta.from_json(old, tmp / META_FILE).updated_now(lexical=settings.to_json())
        write_json_atomic(tmp / META_FILE, meta.to_json())
    return IndexReport(
        out,
        old["kind"],
        "the index's kind",
        dict(old["params"]),
        0,
        held,
        time.perf_counter() - start,
        0,
        "tantivy",
        "cpu",
        appended=False,
    )
