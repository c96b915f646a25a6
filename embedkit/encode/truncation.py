"""Which documents an encoder cut at its maximum length: the texts its token batcher saw cut in its
latest call (`TokenBatcher.cut_positions`), named by the documents they belong to.

A run counts every text cut (the encoder's `truncated`); a note that names them lets the user find
them (`3 documents were longer than the model's maximum length and truncated (a.md, b.md, c.md)`).
Encoders without a token batcher (a test's table of vectors, a remote service) name none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embedkit.data.document import Passage
from embedkit.encode.protocol import TokenizingEncoder

if TYPE_CHECKING:
    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encodes

NAMED = 5  # documents a note names; the rest are counted ("and 7 more")


def cut_positions(encoder: Encodes) -> list[int]:
    """Positions, among the texts of `encoder`'s latest `encode` call, of those cut at its maximum
    length (sorted); none where the encoder has no token batcher to say. Read it right after the
    call, from the thread that made it (a server's concurrent calls share the batcher)."""
    batcher = encoder.batcher if isinstance(encoder, TokenizingEncoder) else None
    return sorted(batcher.cut_positions) if batcher is not None else []


@dataclass
class CutDocuments:
    """The documents whose texts a run cut: the first `NAMED` ids, and how many there were."""

    names: list[str] = field(default_factory=list)
    count: int = 0  # distinct documents (an index of passages may cut several of one)
    _last: str | None = None  # a document's passages come one after another

    def note(self, encoder: Encodes, units: Sequence[Document | Passage]) -> None:
        """After `encoder` embedded `units` (documents, or passages with their `document`), in order."""
        for position in cut_positions(encoder):
            unit = units[position]
            doc_id = str(unit.document.id if isinstance(unit, Passage) else unit.id)
            if doc_id == self._last:
                continue
            self._last = doc_id
            self.count += 1
            if len(self.names) < NAMED:
                self.names.append(doc_id)
