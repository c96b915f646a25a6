"""Calibrating an index's fusion: pseudo queries from its documents, every candidate scored on them.

The pseudo queries are the kinds `embedkit adapt` makes (`embedkit.evaluation.pseudo_kinds`: a
sentence removed from its document, a title matched against its text, the salient terms of a
document), each with its source document as the one relevant answer; `ict-common` adds the ict
sentences without their rare words (`without_rare_words`). Each candidate of
`embedkit.evaluation.fusion_rule.CANDIDATES` is searched by the search pipeline itself
(`embedkit.search.pipeline`, over the sample held in memory: `embedkit.evaluation.memory_store`)
and scored (nDCG@10) on them (`embedkit.evaluation.fusion_candidates`: the task and its
measurements), and `choose` picks: what is calibrated is what `search` runs.

The searched collection is a sample of at most `CalibrationConfig.documents` documents (the
query sources among them), read back from the index with their stored vectors; only the query
sources whose text lost the query are embedded again, so the cost is bounded whatever the size
of the index. Deterministic given the seed. `calibrate_index` records a new calibration in an
index (`embedkit calibrate`) where its choice changes how the index searches, and writes nothing
where it keeps the fusion the index already searches with.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.data.document import Document
from embedkit.encode.prefixes import Prefixes, recorded_prefixes
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.fusion_candidates import PseudoTask, score_task
from embedkit.evaluation.fusion_rule import COMMON, RULE_KINDS, choose, kind_read, score_table
from embedkit.evaluation.passage_sample import PassageSample, sample_passages
from embedkit.evaluation.pseudo_kinds import (
    QUERY_KINDS,
    PseudoQuery,
    document_frequencies,
    make_pseudo_queries,
    words,
)
from embedkit.search import pipeline
from embedkit.search.request import Calibration, default_choice, recorded_choice
from embedkit.storage.locking import locked

if TYPE_CHECKING:
    from embedkit.encode.runtime import Runtime
    from embedkit.index.passages import PassageSettings
    from embedkit.search.store import SearchStore


@dataclass(frozen=True)
class CalibrationConfig:
    """How many pseudo queries of which kinds, over how large a sample of the index."""

    queries: int = 200  # per kind: the size of a typical judged test set (Cranfield has 225)
    kinds: tuple[str, ...] = (
        QUERY_KINDS  # those `embedkit adapt` makes, and window; the rule reads RULE_KINDS
    )
    documents: int = 10_000  # searched sample: bounds the cost on a large index (docs/hybrid.md)
    min_queries: int = 30  # fewer pseudo queries than this: keep the default, say why
    common: bool = (
        False  # also score `ict-common` (measured in benchmarks/calibration.py; not used by the rule)
    )
    # Only the kind the rule reads is made and scored by default (the first of RULE_KINDS with
    # MIN_RULE_QUERIES queries): the others' queries decided nothing and their changed sources
    # were embedded again, half of Cranfield's calibration time. True: every kind of `kinds`,
    # for benchmarks/calibration.py's tables.
    every_kind: bool = False
    common_df: int = 3  # `ict-common` keeps the words of an ict query found in this many documents
    seed: int = 0


# --- the pseudo-query task ------------------------------------------------------------------------


def pseudo_task(documents: Sequence[Document], config: CalibrationConfig) -> PseudoTask:
    """Up to `config.queries` queries of the kind the rule reads (of each kind with `every_kind`),
    each from a document no other query uses.

    A document gives one query at most, so its searched text can lose that query's words (the ICT
    sentence, the title) without changing another query's answer.
    """
    made = make_pseudo_queries(documents, config.kinds, config.seed)
    rng = random.Random(config.seed)
    by_kind = {kind: [q for q in made if q.kind == kind] for kind in config.kinds}
    used: set[int] = set()
    chosen: list[PseudoQuery] = []
    # the kinds the rule reads first (ict needs the most documents), then terms: a small corpus's
    # documents go to the queries that decide
    for kind in sorted(config.kinds, key=lambda k: (k not in RULE_KINDS, QUERY_KINDS.index(k))):
        pool = by_kind[kind]
        rng.shuffle(pool)
        read = kind_read(Counter(q.kind for q in chosen))  # ict or title, once either has enough
        if not config.every_kind and (kind not in RULE_KINDS or read is not None):
            continue  # the rule reads one kind: the first of RULE_KINDS with enough queries
        if kind == "window" and read is not None:
            continue  # a stand-in where sentences and titles are too few: here the rule would not read it
        taken = [q for q in pool if q.source not in used][: config.queries]
        used.update(q.source for q in taken)
        chosen.extend(taken)
    searched = list(documents)
    changed = []
    for q in chosen:
        if q.kind != "terms":  # terms queries leave their document whole
            searched[q.source] = without_query(documents[q.source], q)
            changed.append(q.source)
    df = document_frequencies([d.full_text for d in searched])
    common = [
        PseudoQuery(without_rare_words(q.text, df, config.common_df), q.source, COMMON, q.positive)
        for q in chosen
        if q.kind == "ict" and config.common
    ]
    return PseudoTask(chosen + [q for q in common if q.text], searched, changed)


def without_query(document: Document, query: PseudoQuery) -> Document:
    """The document searched for `query`: its text without the query's, its title kept where the
    query left it whole (an index of passages puts the title before every passage)."""
    title = " ".join(document.title.split())
    if query.kind != "title" and title and query.positive.startswith(title + " "):
        return Document(document.id, query.positive[len(title) + 1 :], title)
    return Document(document.id, query.positive)


def without_rare_words(text: str, df: Counter[str], min_df: int) -> str:
    """`text` without the words found in fewer than `min_df` documents: what only its source shares.

    A sentence cut from a document keeps the document's rare words (names, symbols, a coined
    term), which BM25 matches exactly; people's queries rarely hold them. Stopwords stay.
    """
    return " ".join(t for t in text.split() if all(df[w] >= min_df for w in words(t)))


# --- calibrating an index ---------------------------------------------------------------------------


def calibrate(
    store: SearchStore[Any],
    rows: Sequence[int],
    encoder: Encoder,
    lexical_settings: Any = None,
    config: CalibrationConfig | None = None,
    prefixes: Prefixes | None = None,
    passages: PassageSettings | None = None,  # how an index of passages split its documents
) -> Calibration:
    """Score the candidates on pseudo queries from a sample of the `store`'s `rows` (those held);
    choose by the rule. The sample's documents and stored vectors are read from the store; in a
    store of passages the sample is of documents, each with all its passages
    (`embedkit.evaluation.passage_sample`), and the queries are scored on documents ranked by
    their best passage, as search ranks them.

    Too few pseudo queries (one-sentence documents without titles, a tiny index) keep the default,
    with the reason recorded.
    """
    config = config or CalibrationConfig()
    prefixes = prefixes or Prefixes()
    start = time.perf_counter()
    count = len(rows)
    documents, sample, split = sampled(store, rows, encoder, config, prefixes, passages)
    try:
        task = pseudo_task(documents, config)
    except InputError:  # no document gives any pseudo query
        task = PseudoTask([], documents, [])
    if len(task.queries) < config.min_queries:
        method, alpha, reason = too_few(len(task.queries), config)
        seconds = round(time.perf_counter() - start, 2)
        return Calibration(
            method, alpha, reason, documents=len(documents), count=count, seconds=seconds, seed=config.seed
        )
    if split is not None:
        vectors = split.vectors
    else:
        vectors = pipeline.stored_vectors(store, sample, encoder, prefixes)
    scores = score_task(task, vectors, encoder, lexical_settings, prefixes, split)
    table, intervals = score_table(scores, config.seed)
    picked = choose(scores, config.seed)
    queries = {kind: sum(q.kind == kind for q in task.queries) for kind in config.kinds}
    return Calibration(
        picked.method,
        picked.alpha,
        picked.reason,
        table=table,
        intervals=intervals,
        queries={k: n for k, n in queries.items() if n},
        documents=len(documents),
        count=count,
        seconds=round(time.perf_counter() - start, 2),
        seed=config.seed,
    )


def sampled(
    store: SearchStore[Any],
    rows: Sequence[int],
    encoder: Encoder,
    config: CalibrationConfig,
    prefixes: Prefixes,
    passages: PassageSettings | None,
) -> tuple[list[Document], list[int], PassageSample | None]:
    """The calibration's sample of `rows`: its documents and their rows, or, in a store of
    passages, whole documents with all their passages and vectors (the rows then unused)."""
    if store.passages:  # whole documents sampled, searched by their passages
        if passages is None:
            raise InputError("an index of passages is calibrated with its passage settings")
        split = sample_passages(
            store,
            rows,
            config.documents,
            config.seed,
            passages,
            lambda wanted: pipeline.stored_vectors(store, wanted, encoder, prefixes),
        )
        return split.documents, [], split
    sample = list(rows)
    if len(sample) > config.documents:
        sample = sorted(random.Random(config.seed).sample(sample, config.documents))
    held = store.held_at(sample)
    return [held.get(r) or Document(f"row-{r}", "") for r in sample], sample, None  # type: ignore[misc]


def too_few(count: int, config: CalibrationConfig) -> tuple[str, float, str]:
    """The choice, and why, where only `count` pseudo queries (under `config.min_queries`) were cut."""
    method, alpha = default_choice()
    return method, alpha, f"{count} pseudo queries, fewer than {config.min_queries}: the default"


def calibrate_version(
    folder: Path,
    vectors: Any,
    meta: dict[str, Any],
    encoder: Encoder,
    settings: Any,
    config: CalibrationConfig | None = None,
) -> Calibration:
    """`calibrate` over the version folder `folder` (being written: its documents) and its FAISS
    index `vectors`; `meta` holds the index's dim, kind, params and prefixes."""
    from embedkit.index.docstore import DocStore
    from embedkit.index.folder import DOCS_FILE
    from embedkit.index.local_store import LocalStore
    from embedkit.index.passages import PassageSettings

    store = LocalStore(meta, vectors, DocStore.open(folder / DOCS_FILE), folder)
    try:
        rows = store.docs.rows_between(0, store.docs.next_row())
        split = PassageSettings.from_json(meta["passages"]) if meta.get("passages") else None
        return calibrate(store, rows, encoder, settings, config, recorded_prefixes(meta), split)
    finally:
        store.close()


@dataclass(frozen=True)
class IndexCalibration:
    """What `calibrate_index` chose, and whether it wrote a new version to record it."""

    calibration: Calibration
    written: bool  # False: the index searches with this choice already; nothing was written


@locked("out")
def calibrate_index(
    out: str | Path,
    model: Encoder | str | Path | None = None,  # None: the index's model
    *,
    runtime: Runtime | None = None,  # where a model folder is opened (None: `Runtime()`'s defaults)
    config: CalibrationConfig | None = None,
) -> IndexCalibration:
    """Calibrate the index in `out` (`embedkit calibrate`) on its live version, read only; where the
    choice differs from the fusion it searches with (the recorded one, else the default), record
    it in a new version, its files copied unchanged and only its metadata gaining the calibration
    (a kill leaves the old version live). Where the choice is the same, nothing is written. An index
    without a lexical side has nothing to fuse: an `InputError`.
    """
    import shutil

    from embedkit.index.folder import (
        INDEX_FILE,
        META_FILE,
        index_files_dir,
        open_model_for,
        read_faiss,
        read_index_meta,
    )
    from embedkit.index.lexical import lexical_settings
    from embedkit.index.meta import IndexMeta
    from embedkit.storage.atomic import write_json_atomic
    from embedkit.storage.checksums import CHECKSUMS
    from embedkit.storage.versioned import new_version

    out = Path(out)
    meta = read_index_meta(out)
    settings = lexical_settings(meta.get("lexical"))
    if settings is None:
        raise InputError(
            f"the index {out} has no current lexical side, so no fusion to calibrate: add one with "
            f"`embedkit index --out {out} --reindex-lexical`"
        )
    if model is None or isinstance(model, (str, Path)):
        encoder = open_model_for(meta, model, runtime)
    elif model.fingerprint != meta["model_fingerprint"] or model.dim != meta["dim"]:
        raise InputError(
            f"the encoder's model is not {meta['model']}, the model the index {out} was built with"
        )
    else:
        encoder = model
    live = index_files_dir(out)  # unchanged while this holds the index's write lock
    vectors = read_faiss(live / INDEX_FILE, meta)  # checked against the live version's checksums
    calibration = calibrate_version(live, vectors, meta, encoder, settings, config)
    if (calibration.method, calibration.alpha) == recorded_choice(meta):
        return IndexCalibration(calibration, written=False)
    with new_version(out) as tmp:
        shutil.copytree(live, tmp, ignore=shutil.ignore_patterns(META_FILE, CHECKSUMS), dirs_exist_ok=True)
        record = IndexMeta.from_json(meta, tmp / META_FILE).updated_now(fusion=calibration.to_json())
        write_json_atomic(tmp / META_FILE, record.to_json())
    return IndexCalibration(calibration, written=True)
