"""What one index build changes: the documents it embeds, those it replaces (`--upsert`), and with
`--sync` those it keeps and those it deletes (`embedkit.jobs.index_build` runs them).

`embedkit index CORPUS --out INDEX --sync` keeps an index in step with its corpus, as LangChain's
indexing API does with its record manager and `cleanup="full"`: every document of the corpus is
looked up by its id (a folder's file path, a JSONL or BEIR record's `_id`, a table's id column) and
its content hash (`embedkit.index.content_hash`: title, text and metadata) compared with the one
the index stored:
- the same hash: kept, its vector and rows as they are; nothing embedded;
- another hash: replaced, as `--append --upsert` replaces (every row deleted, the new text embedded);
- an id the index does not hold: embedded and added;
- an id the index holds that the corpus no longer gives: deleted, as `embedkit delete` deletes.
All of it goes into one new version, made live in one rename like every write
(`embedkit.storage.versioned`): a kill leaves the old version, and the next sync finds the same
changes again. Where nothing changed, no version is written (`Unchanged`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from embedkit.data.document import ReadStats
from embedkit.data.fingerprint import CorpusFingerprint, combined
from embedkit.encode.truncation import CutDocuments
from embedkit.errors import InputError
from embedkit.index.build_report import IndexReport
from embedkit.index.content_hash import content_hash
from embedkit.index.edits import remove_documents
from embedkit.index.layout import is_index_folder
from embedkit.storage.versioned import holds_no_version

if TYPE_CHECKING:
    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encoder
    from embedkit.index.docstore import DocStore
    from embedkit.jobs.index_vectors import VectorWriter


class Unchanged(Exception):
    """A sync found every document of the corpus held unchanged and none to delete: nothing to write."""

    def __init__(self, kept: int, read: ReadStats) -> None:
        super().__init__(f"{kept} documents unchanged")
        self.kept = kept
        self.read = read  # what reading the corpus skipped, for the report


class Tally:
    """The documents read and embedded: their count and fingerprint, and those they replaced or
    (a sync) deleted."""

    def __init__(self, old: dict[str, Any] | None) -> None:
        self.read = ReadStats()
        self.count = 0  # documents embedded
        self.replaced = 0
        self.cut = CutDocuments()  # the documents whose texts the model cut at its maximum length
        self._new = CorpusFingerprint()
        self._appending = old is not None
        self._old = old.get("corpus_fingerprint") if old else None  # less the documents removed

    def add(self, documents: list) -> None:
        for doc in documents:
            self._new.add_fields(doc.id, doc.title, doc.text)
        self.count += len(documents)

    def replace(self, store: DocStore, writer: VectorWriter, chunk: list) -> None:
        """Remove the index's documents (every row) whose ids `chunk` holds: those held before this
        run; a repeated id within the corpus stays a duplicate (an `InputError` at `add`)."""
        found = store.rows_by_id(list(dict.fromkeys(str(unit.id) for unit in chunk)))
        earlier = {doc_id: [r for r in rows if r < writer.first_row] for doc_id, rows in found.items()}
        self.remove(store, writer, sorted(r for held in earlier.values() for r in held))
        self.replaced += sum(1 for held in earlier.values() if held)

    def remove(self, store: DocStore, writer: VectorWriter, rows: list[int]) -> None:
        """Delete the vector `rows` from the index being written and its store."""
        if rows:
            held = np.asarray(rows, dtype=np.int64)
            writer.index, self._old = remove_documents(writer.index, store, writer.kind, held, self._old)

    def fingerprint(self) -> str | None:
        """The index's: this corpus's, added to the appended index's (None: that one is unknown)."""
        return combined(self._old, self._new.hex) if self._appending else self._new.hex


class SyncTracker:
    """A sync's view of the corpus as it streams: the ids seen, the documents kept unchanged."""

    def __init__(self, store: DocStore) -> None:
        self.store = store
        self.seen: set[str] = set()  # every id the corpus gave (the rest of the index's are deleted)
        self.kept = 0
        self.deleted = 0

    def changed(self, documents: list[Document]) -> list[Document]:
        """Those of `documents` to embed: new ones and changed ones (the unchanged are counted as
        kept). An id the corpus gives twice is an `InputError`, as in every build."""
        ids = [str(doc.id) for doc in documents]
        for doc_id in ids:
            if doc_id in self.seen:
                reason = "the corpus gives it twice, and ids in an index must be unique"
                raise InputError(f"duplicate document id {doc_id!r}: {reason}")
            self.seen.add(doc_id)
        # looked up before this chunk is stored: every hash found is one the index held before the sync
        held = self.store.content_hashes(ids)
        changed = [
            doc for doc, doc_id in zip(documents, ids, strict=True) if held.get(doc_id) != content_hash(doc)
        ]
        self.kept += len(documents) - len(changed)
        return changed

    def finish(self, tally: Tally, writer: VectorWriter, corpus: str) -> None:
        """Once the corpus is read: delete the documents it no longer gives; `Unchanged` where
        nothing was embedded or deleted. An empty corpus is an `InputError` (it would delete all)."""
        if not self.seen:
            raise InputError(f"empty corpus: {corpus} holds no documents")
        gone = [doc_id for doc_id in self.store.ids() if doc_id not in self.seen]
        self.deleted = len(gone)
        tally.remove(
            self.store, writer, sorted(row for rows in self.store.rows_by_id(gone).values() for row in rows)
        )
        if not tally.count and not self.deleted:
            raise Unchanged(self.kept, tally.read)


def sync_into_index(out: Path, append: bool, overwrite: bool) -> bool:
    """Whether a sync into `out` updates the index there (as an upsert, with what `SyncTracker`
    adds), or builds a new one where `out` holds none; with --append or --overwrite an `InputError`."""
    if append or overwrite:
        raise InputError(
            "--sync keeps the index in --out in step with the corpus: drop --append and --overwrite"
        )
    return out.is_dir() and is_index_folder(out) and not holds_no_version(out)


def unchanged_report(
    out: Path, old: dict[str, Any], encoder: Encoder, prefixes: str, same: Unchanged, seconds: float
) -> IndexReport:
    """The report of a sync that found nothing to change (and wrote nothing)."""
    return IndexReport(
        out,
        old["kind"],
        old.get("kind_reason", "the index's kind"),
        dict(old["params"]),
        0,
        same.kept,  # every document the index holds, as the corpus gave them all
        seconds,
        0,
        encoder.backend,
        str(encoder.device),
        appended=True,
        blank=same.read.blank,
        hidden_files=same.read.hidden,
        binary_files=same.read.binary,
        recoded_files=tuple(same.read.recoded),
        skipped_files=tuple(same.read.skipped),
        prefixes=prefixes,
        kept=same.kept,
        synced=True,
        written=False,
    )
