"""What a write of an index folder did: a build, an append, a rebuild from part files or of its BM25 side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedkit.search.request import Calibration


@dataclass(frozen=True)
class IndexReport:
    """What `build_index` (or `build_index_from_vectors`, `rebuild_lexical`) did."""

    path: Path
    kind: str
    reason: str  # why this kind: auto's choice, "asked for", or the appended index's kind
    params: dict[str, Any]
    added: int
    count: int  # documents in the index afterwards
    seconds: float
    truncated: int  # added documents (or passages) cut at the model's max_seq_length
    backend: str
    device: str
    appended: bool
    blank: int = 0  # blank documents of the corpus, skipped (BEIR counts them: `eval` says n + blank)
    faiss_device: str = "cpu"  # where faiss built the index: cpu or cuda:N (`embedkit.index.faiss_gpu`)
    calibrated: Calibration | None = None  # the fusion calibration this build made (`IndexMeta.fusion`)
    replaced: int = 0  # `upsert`: documents of the index that the corpus replaced
    passages: int = 0  # passages added (their vectors), where the index holds passages
    hidden_files: int = 0  # hidden files and folders of a folder of text files, left out
    binary_files: int = 0  # binary files of such a folder, skipped
    recoded_files: tuple[str, ...] = ()  # files of such a folder read from another encoding than UTF-8
    skipped_files: tuple[str, ...] = ()  # files of such a folder past a reader's bounds: one line each, why
    # the `--passages` that would have cut nothing, where whole documents were cut (None: none were)
    passage_advice: str | None = None
    prefixes: str = "no prefixes"  # the query and passage prefixes the index embeds with
    truncated_ids: tuple[str, ...] = ()  # the first few documents cut (`embedkit.encode.truncation`)
    truncated_documents: int = 0  # the documents cut (of an index of passages: those with a passage cut)
    kept: int = 0  # a sync: documents the corpus gave unchanged, kept without embedding
    deleted: int = 0  # a sync: documents the corpus no longer gave, deleted
    synced: bool = False  # made by a sync (`added` is then the documents embedded)
    written: bool = True  # a new version was written (a sync that found nothing changed writes none)
