"""A document as every reader yields it, a passage of one, and the counts kept while reading a corpus.

Its own module so that the readers (`corpus`, `textfolder`, `converters`) share it without
importing each other; `embedkit.data.corpus` re-exports `Document` and `ReadStats`. A `Passage` is
what an index of passages holds at a row (`embedkit.index.passages` cuts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The most text one document of a folder corpus may hold, as UTF-8: a file is one document,
# tokenized whole before it is cut to the model's length (5 MB took 8 s of CPU here, 16 MB two
# minutes on a busy machine). 4 MiB holds the longest novels.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


@dataclass
class Document:
    """One document: BEIR's `_id`, `title` and `text`, plus any other fields of its record."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def full_text(self) -> str:
        """Title and text joined by a space, BEIR's convention for embedding a document."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass
class Passage:
    """One passage of a document: the characters `start:end` of its text.

    It reads like a `Document` where the embedder and the lexical side look (`title`, `text`,
    `full_text`, `id`), so both index exactly the passage's words.
    """

    document: Document
    number: int  # 0 for a document's first passage
    start: int  # character offsets into document.text
    end: int

    @property
    def id(self) -> str:
        return self.document.id

    @property
    def title(self) -> str:
        return self.document.title

    @property
    def text(self) -> str:
        return self.document.text[self.start : self.end]

    @property
    def full_text(self) -> str:
        return f"{self.title} {self.text}".strip() if self.title else self.text


TextSpan = Document | Passage  # what an index row holds: a document, or a passage of one


@dataclass
class ReadStats:
    """Counts kept while streaming documents (filled in as the iterator is consumed)."""

    read: int = 0  # documents yielded
    blank: int = 0  # records skipped because their title and text are blank
    hidden: int = 0  # hidden files and folders of a folder of documents, not read
    binary: int = 0  # files of such a folder skipped as binary (a NUL byte)
    recoded: list[str] = field(default_factory=list)  # files of such a folder read from another encoding
    skipped: list[str] = field(default_factory=list)  # files of such a folder past a reader's bounds, why
