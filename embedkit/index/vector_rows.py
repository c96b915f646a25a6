"""`IndexRows`: an index's vector rows, by position, as faiss numbers them (`index.rows`).

A `SearchIndex` has two kinds of caller. A user holds documents and ids: texts in, hits out
(`search_text`), query vectors in, document ids out (`search`), documents and their vectors by id
(`get_documents`, `documents_held`, `vectors_of_documents`). Code that works over the whole
index as arrays holds rows: `adapt` reads every row's document and vector to mine and to draw
negatives (`training/adapt`), and the by-id calls above resolve ids to rows and read them here.
A row is a vector's permanent key (`embedkit.search.store`): one per document, or one per passage
in an index of passages, so the row count is not the document count. `SearchIndex` keeps the
user's face; this object is the rows', reached as `index.rows`:

>>> index = SearchIndex.load("cranfield-index")  # doctest: +SKIP
>>> count = len(index.rows)  # vector rows, one per passage in an index of passages  # doctest: +SKIP
>>> vectors = index.rows.vectors(range(count))  # [count, dim], unit length  # doctest: +SKIP
>>> documents = index.rows.documents(range(count))  # the document of each row  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from embedkit.data.document import Passage
from embedkit.search import pipeline

if TYPE_CHECKING:
    import numpy as np

    from embedkit.data.document import Document
    from embedkit.encode.prefixes import Prefixes
    from embedkit.encode.protocol import Encoder
    from embedkit.search.store import SearchStore


class IndexRows:
    """The vector rows of an index's store: how many, their vectors, their documents."""

    def __init__(
        self,
        store: SearchStore[Any],
        prefixes: Prefixes,
        model: Callable[[Encoder | None], Encoder],  # an encoder checked for the index (None: its own)
    ) -> None:
        self.store = store
        self.prefixes = prefixes
        self.model = model

    def __len__(self) -> int:
        """The live vector rows (documents, or passages in an index of passages)."""
        return self.store.reachable(None)

    def vectors(self, rows: Sequence[int], encoder: Encoder | None = None) -> np.ndarray:
        """The stored (normalised) vectors of `rows`, [len(rows), dim].

        Read back from the store where it can (FAISS: flat and HNSW exactly, IVF-PQ as its codes
        decode); else what each row holds is embedded again with `encoder` (None: the index's model).
        """
        stored = self.store.vectors_of_rows(rows)
        if stored is not None:
            return stored
        return pipeline.embedded_rows(self.store, rows, self.model(encoder), self.prefixes)

    def documents(self, rows: Sequence[int]) -> list[Document | None]:
        """The documents at `rows` (None where there is none), in the order asked; in an index of
        passages, the document each row's passage belongs to."""
        held = self.store.held_at(rows)
        found = [held.get(r) for r in rows]
        return [unit.document if isinstance(unit, Passage) else unit for unit in found]
