"""A `DocStore`'s BM25 side: a new one filled from the documents the store holds (a build, or
`--reindex-lexical` of an index an earlier embedkit wrote), and lexical search through it.

A mixin of `DocStore` (`docstore.py`), which opens the side with the store; it uses the store's
`_db`, `path`, `lexical`, `lexical_dir`, `has_passages` and `_select_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from embedkit.errors import InputError
from embedkit.index.lexical import LexicalIndex, LexicalSettings

LEGACY_LEXICAL_TABLES = ("lexical_settings", "lexical_segments", "lexical_postings")
_REINDEX_BATCH = 10_000


class LexicalSide:
    """The BM25 side of a document store (see the module's docstring)."""

    def enable_lexical(
        self, settings: LexicalSettings | None = None, on_batch: Callable[[int], object] | None = None
    ) -> LexicalSettings:
        """Give this store a new BM25 side, filled from the documents it holds; `add` then keeps it in step.

        Run in a staging folder (a new build, or `rebuild_lexical`'s copy): it drops the tables of
        an earlier embedkit's lexical index from this file.
        """
        if self.lexical is not None or self.lexical_dir.exists():
            raise InputError(f"{self.path.parent} already holds a lexical index")
        for table in LEGACY_LEXICAL_TABLES:
            self._db.execute(f"DROP TABLE IF EXISTS {table}")
        self.legacy_lexical = False
        self.lexical = LexicalIndex.create(self.lexical_dir, settings)
        after = -1
        table = "passages" if self.has_passages else "documents"
        while True:  # vector rows ascending, with the gaps deleted documents left
            query = f"SELECT row FROM {table} WHERE row > ? ORDER BY row LIMIT ?"
            rows = [int(r) for (r,) in self._db.execute(query, (after, _REINDEX_BATCH))]
            if not rows:
                return self.lexical.settings
            # what the index holds at each row: a document, or a passage of one (its title + span)
            found = self._select_rows(rows)
            self.lexical.add_rows(rows, [found[row] for row in rows])
            after = rows[-1]
            if on_batch is not None:
                on_batch(len(rows))

    def vacuum(self) -> None:
        """Rewrite the SQLite file without its free pages (after dropping tables)."""
        self._db.execute("VACUUM")

    def search_lexical(
        self, queries: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> list[list[tuple[int, float]]]:
        """Each query's best `k` (row, BM25 score), among `allowed` rows if given (sorted);
        `InputError` without a lexical side."""
        if self.lexical is None:
            raise InputError(f"{self.path.parent} has no lexical index")
        return self.lexical.search(queries, k, allowed)
