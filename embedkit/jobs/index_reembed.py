"""Re-embedding an index with another model: a new version of the same documents, new vectors.

`embedkit adapt` ends here: the index's documents (ids, titles, texts, metadata) are embedded again
with the adapted model into a new version of the same kind (`build_index(overwrite=True)`, the
versioned replace: a kill leaves the old version searchable). The result is what a fresh `embedkit
index` of the same corpus with that model gives: the same passages, prefixes, dimension and
quantization too, but for the fusion: the new version keeps the index's recorded one (or none, and
so the default), not a calibration made with the new model. An adapted model was trained on pseudo
queries cut from these very documents, the kind the calibration scores, so it looks better on them
than it is: on Cranfield a calibration after `adapt` turned fusion off (dense 52.32 nDCG@10), where
the kept fusion of the base model's calibration scored 56.79 (docs/training.md "After adapt: the
index").
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from embedkit.data.fingerprint import CorpusFingerprint
from embedkit.encode.runtime import Runtime
from embedkit.errors import EmbedkitError
from embedkit.index.build_report import IndexReport
from embedkit.index.docstore import DocStore
from embedkit.index.folder import DOCS_FILE, index_files_dir, read_index_meta
from embedkit.index.passages import PassageSettings
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_options import IndexOptions
from embedkit.jobs.streaming import CorpusOptions, read_corpus
from embedkit.search.request import Calibration

_DUMP_ROWS = 10_000  # documents read from the store at a time


def reembed_index(
    index: str | Path, model: str | Path, *, runtime: Runtime | None = None, progress: bool = False
) -> IndexReport:
    """Replace the index in `index` by its documents embedded with `model`, keeping its kind, sides and
    fusion (see the module's docstring).

    The corpus the index records is read again when it still holds exactly the indexed documents
    (same fingerprint), so the new version names it as its source; otherwise the documents are
    written from the index's own store to a temporary JSON-lines file and embedded from there.
    """
    path = Path(index)
    meta = read_index_meta(path)
    options = CorpusOptions()
    with tempfile.TemporaryDirectory(prefix="embedkit-reembed-") as tmp:
        corpus = _recorded_corpus(meta, options)
        if corpus is None:
            corpus = Path(tmp) / "corpus.jsonl"
            with DocStore.open(index_files_dir(path) / DOCS_FILE) as store:
                _write_documents(store, corpus)
        settings = IndexOptions(
            kind=str(meta["kind"]),
            dim=int(meta["dim"]) if meta.get("model_dim") else None,  # `index --dim`, kept
            quantize=meta["params"].get("quantize"),  # `index --quantize`, kept
            overwrite=True,
            lexical=meta.get("lexical") is not None,
            calibrate=False,
            passages=PassageSettings.from_json(meta["passages"]) if meta.get("passages") else None,
            query_prefix=str(meta.get("query_prefix") or ""),
            passage_prefix=str(meta.get("passage_prefix") or ""),
            runtime=runtime or Runtime(),
            corpus=options,
        )
        fusion = Calibration.from_json(meta["fusion"]) if meta.get("fusion") else None
        return build_index(corpus, path, model, settings, progress=progress, fusion=fusion)


def _recorded_corpus(meta: dict, options: CorpusOptions) -> Path | None:
    """The index's one recorded source, when it exists and still holds exactly the indexed documents."""
    sources = meta.get("sources") or []
    if len(sources) != 1 or not meta.get("corpus_fingerprint"):
        return None
    source = Path(str(sources[0].get("corpus", "")))
    if not source.exists():
        return None
    fingerprint = CorpusFingerprint()
    try:
        for doc in read_corpus(source, options):
            fingerprint.add_fields(doc.id, doc.title, doc.text)
    except EmbedkitError:  # unreadable now, or read with other columns: the store's copy is the truth
        return None
    return source if fingerprint.hex == meta["corpus_fingerprint"] else None


def _write_documents(store: DocStore, out: Path) -> None:
    """The store's documents as BEIR JSON lines (`_id`, `title`, `text`, then their other fields)."""
    with out.open("w", encoding="utf-8") as file:
        for doc in store.iter_documents(_DUMP_ROWS):
            record = {**doc.metadata, "_id": doc.id, "title": doc.title, "text": doc.text}
            file.write(json.dumps(record, ensure_ascii=False) + "\n")


__all__ = ["reembed_index"]
