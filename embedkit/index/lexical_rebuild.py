"""Building an index's lexical (BM25) side from its own documents, without re-embedding.

`fill_lexical` gives an open document store a new tantivy side filled from what it holds (a new
build, `compact`, an upgraded copy of an earlier embedkit's index); `rebuild_lexical` does it
for an index folder, as a new version (`embedkit index --reindex-lexical`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from embedkit.errors import InputError
from embedkit.index.build_report import IndexReport
from embedkit.index.docstore import READ_BATCH, DocStore
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, index_files_dir, read_index_meta
from embedkit.index.lexical import LexicalIndex, LexicalSettings
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
                settings = fill_lexical(store, on_batch=bar.advance)
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


def fill_lexical(
    store: DocStore, settings: LexicalSettings | None = None, on_batch: Callable[[int], object] | None = None
) -> LexicalSettings:
    """Give `store` a new BM25 side, filled from the documents it holds; its `add` then keeps it in step.

    Run in a staging folder (a new build, or a rebuild's copy): it drops the tables of an earlier
    embedkit's lexical index from the store's file.
    """
    if store.lexical is not None or store.lexical_dir.exists():
        raise InputError(f"{store.path.parent} already holds a lexical index")
    store.drop_legacy_lexical()
    lexical = store.lexical = LexicalIndex.create(store.lexical_dir, settings)  # closed with the store
    stop = store.next_row()
    for first in range(0, stop, READ_BATCH):  # vector rows ascending, with the gaps deletions left
        rows = store.rows_between(first, first + READ_BATCH)
        held = store.held_at(rows)  # a document, or a passage of one (its title + span)
        lexical.add_rows(rows, [held[row] for row in rows])
        if on_batch is not None and rows:
            on_batch(len(rows))
    return lexical.settings
