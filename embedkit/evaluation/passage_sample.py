"""The calibration's sample of an index of passages: documents to cut pseudo queries from, and the
passages search ranks them by.

An index of passages (`embedkit.index.passages`) holds one row per passage; search ranks documents
by their best passage (`embedkit.search.pipeline.by_document`). The fusion calibration
(`embedkit.evaluation.fusion_calibration`) cuts its pseudo queries from whole documents, as a user
asks for a document, and searches the sample as the index does: a `MemoryStore` of the sample's
passages with each passage's document number, so the pipeline's own grouping ranks documents. A
document whose text lost its query (an ICT sentence, a window, a title) is split again with the
index's tokenizer and settings and its new passages embedded, as the index would hold it; the
other documents keep their stored passages and vectors.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.document import Document, Passage

if TYPE_CHECKING:
    from embedkit.encode.prefixes import Prefixes
    from embedkit.encode.protocol import Encoder
    from embedkit.index.passages import PassageSettings
    from embedkit.search.store import SearchStore


@dataclass(frozen=True)
class PassageSample:
    """Sampled documents of an index of passages, with their stored passages and vectors."""

    documents: list[Document]  # the sampled documents, whole (what pseudo queries are cut from)
    passages: list[list[Passage]]  # each sampled document's passages, first to last
    vectors: np.ndarray  # the stored vectors of those passages, in that order
    settings: PassageSettings  # how the index split its documents

    def searched(
        self, documents: Sequence[Document], changed: Sequence[int], encoder: Encoder, prefixes: Prefixes
    ) -> tuple[list[Passage], np.ndarray, list[int]]:
        """(passages, their vectors, each one's document number) of the searched sample: the
        documents at `changed` (positions) replaced by `documents`' text, split and embedded again."""
        from embedkit.index.passages import PassageSplitter

        fresh: dict[int, list[Passage]] = {}
        if changed:
            position = {id(documents[i]): i for i in changed}  # the splitter keeps each document
            splitter = PassageSplitter(encoder.path, self.settings)
            for passage in splitter.split([documents[i] for i in changed]):
                fresh.setdefault(position[id(passage.document)], []).append(passage)
        new = [p for i in sorted(fresh) for p in fresh[i]]  # in the order they are placed below
        texts = prefixes.passages([p.full_text for p in new])
        embedded = iter(encoder.encode(texts, normalize=True).reshape(len(new), -1) if new else [])
        passages: list[Passage] = []
        vectors: list[np.ndarray] = []
        numbers: list[int] = []
        offset = 0
        for number, stored in enumerate(self.passages):
            if number in fresh:
                passages += fresh[number]
                vectors += [next(embedded) for _ in fresh[number]]
            else:
                passages += stored
                vectors += list(self.vectors[offset : offset + len(stored)])
            numbers += [number] * len(fresh.get(number, stored))
            offset += len(stored)
        return passages, np.asarray(vectors, dtype=np.float32).reshape(len(passages), -1), numbers


def sample_passages(
    store: SearchStore[Any],
    rows: Sequence[int],
    limit: int,
    seed: int,
    settings: PassageSettings,
    stored_vectors: Any,  # (rows) -> their vectors: `embedkit.search.pipeline.stored_vectors`, bound
) -> PassageSample:
    """At most `limit` documents of the passage `rows` (those held), drawn with `seed`, each with
    all its passages: a document is searched whole or not at all."""
    numbers = store.document_numbers(rows)
    by_document: dict[int, list[int]] = {}
    for row in rows:
        if int(row) in numbers:
            by_document.setdefault(numbers[int(row)], []).append(int(row))
    chosen = sorted(by_document)
    if len(chosen) > limit:
        chosen = sorted(random.Random(seed).sample(chosen, limit))
    held = store.held_at([row for number in chosen for row in by_document[number]])
    # a document is searched with every passage of it, or not at all
    whole = [n for n in chosen if all(isinstance(held.get(r), Passage) for r in by_document[n])]
    passages = [[held[r] for r in by_document[n]] for n in whole]
    return PassageSample(
        [group[0].document for group in passages],  # type: ignore[union-attr]
        passages,  # type: ignore[arg-type]
        np.asarray(stored_vectors([r for n in whole for r in by_document[n]]), dtype=np.float32),
        settings,
    )
