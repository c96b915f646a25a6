"""Calibrating an index's fusion: pseudo queries from its documents, every candidate scored on them.

The pseudo queries are the kinds `embedkit adapt` makes (`embedkit.evaluation.pseudo_kinds`: a
sentence removed from its document, a title matched against its text, the salient terms of a
document), each with its source document as the one relevant answer; `ict-common` adds the ict
sentences without their rare words (`without_rare_words`). Each candidate of
`embedkit.index.calibration.CANDIDATES` is scored (nDCG@10) on them, and `choose` picks.

The searched collection is a sample of at most `CalibrationConfig.documents` documents (the
query sources among them), read back from the index with their stored vectors; only the query
sources whose text lost the query are embedded again, so the cost is bounded whatever the size
of the index. Deterministic given the seed.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.corpus import Document
from embedkit.encode.prefixes import Prefixes, recorded_prefixes
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.metrics import evaluate_run
from embedkit.evaluation.pseudo_kinds import (
    QUERY_KINDS,
    PseudoQuery,
    document_frequencies,
    make_pseudo_queries,
    words,
)
from embedkit.evaluation.runs import exact_search, feedback_run, fuse_runs, lexical_run
from embedkit.index.calibration import (
    CANDIDATES,
    COMMON,
    LEXICAL,
    Calibration,
    choose,
    default_choice,
    label,
)
from embedkit.index.fusion import DEFAULT_ALPHA
from embedkit.storage.locking import locked

Run = dict[str, dict[str, float]]
DEPTH = 100  # candidates per side before fusion, as `embedkit.index.search.FUSION_DEPTH`


@dataclass(frozen=True)
class CalibrationConfig:
    """How many pseudo queries of which kinds, over how large a sample of the index."""

    queries: int = 200  # per kind: the size of a typical judged test set (Cranfield has 225)
    kinds: tuple[str, ...] = QUERY_KINDS  # those `embedkit adapt` makes; the rule reads ict (or title)
    documents: int = 10_000  # searched sample: bounds the cost on a large index (docs/hybrid.md)
    min_queries: int = 30  # fewer pseudo queries than this: keep the default, say why
    common: bool = (
        False  # also score `ict-common` (measured in benchmarks/calibration.py; not used by the rule)
    )
    common_df: int = 3  # `ict-common` keeps the words of an ict query found in this many documents
    seed: int = 0


# --- the pseudo-query task ------------------------------------------------------------------------


@dataclass(frozen=True)
class PseudoTask:
    """Queries with one relevant document each, and the searched sample without the queries' text."""

    queries: list[PseudoQuery]  # source = the row in `documents`
    documents: list[Document]  # searched: a query's source holds its `positive` text
    changed: list[int]  # rows whose text a query changed (their vectors must be embedded again)

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return {f"q{i}": {self.documents[q.source].id: 1} for i, q in enumerate(self.queries)}


def pseudo_task(documents: Sequence[Document], config: CalibrationConfig) -> PseudoTask:
    """Up to `config.queries` queries of each kind, each from a document no other query uses.

    A document gives one query at most, so its searched text can lose that query's words (the ICT
    sentence, the title) without changing another query's answer.
    """
    made = make_pseudo_queries(documents, config.kinds, config.seed)
    rng = random.Random(config.seed)
    by_kind = {kind: [q for q in made if q.kind == kind] for kind in config.kinds}
    used: set[int] = set()
    chosen: list[PseudoQuery] = []
    for kind in config.kinds:  # in QUERY_KINDS order: ict first, it needs the most documents
        pool = by_kind[kind]
        rng.shuffle(pool)
        taken = [q for q in pool if q.source not in used][: config.queries]
        used.update(q.source for q in taken)
        chosen.extend(taken)
    searched = list(documents)
    changed = []
    for q in chosen:
        if q.kind != "terms":  # terms queries leave their document whole
            searched[q.source] = Document(documents[q.source].id, q.positive)
            changed.append(q.source)
    df = document_frequencies([d.full_text for d in searched])
    common = [
        PseudoQuery(without_rare_words(q.text, df, config.common_df), q.source, COMMON, q.positive)
        for q in chosen
        if q.kind == "ict" and config.common
    ]
    return PseudoTask(chosen + [q for q in common if q.text], searched, changed)


def without_rare_words(text: str, df: Counter[str], min_df: int) -> str:
    """`text` without the words found in fewer than `min_df` documents: what only its source shares.

    A sentence cut from a document keeps the document's rare words (names, symbols, a coined
    term), which BM25 matches exactly; people's queries rarely hold them. Stopwords stay.
    """
    return " ".join(t for t in text.split() if all(df[w] >= min_df for w in words(t)))


# --- scoring the candidates -----------------------------------------------------------------------


def candidate_runs(
    query_ids: list[str],
    query_vectors: np.ndarray,
    doc_ids: list[str],
    doc_vectors: np.ndarray,
    lexical: Run,
    depth: int = DEPTH,
) -> dict[str, Run]:
    """Each candidate's run (and BM25's), by exact search over `doc_vectors`; `lexical` is BM25's run."""
    dense = exact_search(query_vectors, doc_vectors, doc_ids, depth, query_ids)
    row_of = {doc: row for row, doc in enumerate(doc_ids)}
    runs: dict[str, Run] = {LEXICAL: lexical}
    for method, alpha in CANDIDATES:
        name = label(method, alpha)
        if method == "dense":
            runs[name] = dense
        elif method == "prf":
            runs[name] = feedback_run(  # the first ranking over both sides' DEPTH candidates, as search
                dense,
                lexical,
                query_ids,
                query_vectors,
                lambda ids: doc_vectors[[row_of[i] for i in ids]],
                lambda vectors, qids: exact_search(vectors, doc_vectors, doc_ids, 10, qids),
                float(alpha),  # type: ignore[arg-type]
            )
        else:
            runs[name] = fuse_runs(dense, lexical, 10, method, DEFAULT_ALPHA if alpha is None else alpha)
    return runs


def per_query_ndcg(runs: dict[str, Run], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """candidate -> query id -> nDCG@10 (in [0, 1])."""
    return {
        name: {q: m["ndcg@10"] for q, m in evaluate_run(run, qrels, ("ndcg@10",)).per_query.items()}
        for name, run in runs.items()
    }


def score_task(
    task: PseudoTask,
    vectors: np.ndarray,
    encoder: Encoder,
    lexical_settings: Any = None,
    prefixes: Prefixes | None = None,  # the index's query and passage prefixes (none: no prefix)
) -> dict:
    """candidate -> kind -> nDCG@10 x 100 of the task; `vectors` are the sample's stored vectors."""
    from embedkit.index.lexical import LexicalIndex

    prefixes = prefixes or Prefixes()
    doc_vectors = np.array(vectors, dtype=np.float32)
    if task.changed:  # the sources without their query's text, embedded as the index would
        texts = prefixes.passages([task.documents[row].full_text for row in task.changed])
        doc_vectors[task.changed] = encoder.encode(texts, normalize=True)
    query_ids = [f"q{i}" for i in range(len(task.queries))]
    texts = [q.text for q in task.queries]
    query_vectors = encoder.encode(prefixes.queries(texts), normalize=True).reshape(len(texts), -1)
    bm25 = LexicalIndex.create(None, lexical_settings)
    try:
        bm25.add(0, task.documents)
        bm25.commit()
        doc_ids = [d.id for d in task.documents]
        lexical = lexical_run(bm25.search(texts, DEPTH), doc_ids, query_ids, DEPTH)
    finally:
        bm25.close()
    scores = per_query_ndcg(
        candidate_runs(query_ids, query_vectors, doc_ids, doc_vectors, lexical), task.qrels
    )
    kinds = sorted({q.kind for q in task.queries}, key=(*QUERY_KINDS, COMMON).index)
    table: dict[str, dict[str, float]] = {}
    for name, values in scores.items():
        row = {}
        for kind in kinds:
            mine = [values[qid] for qid, q in zip(query_ids, task.queries, strict=True) if q.kind == kind]
            row[kind] = round(100 * float(np.mean(mine)), 2)
        table[name] = row
    return table


# --- calibrating an index ---------------------------------------------------------------------------


def calibrate(
    documents_of_rows: Callable[[list[int]], list[Document]],
    vectors_of_rows: Callable[[list[int]], np.ndarray],
    count: int,
    encoder: Encoder,
    lexical_settings: Any = None,
    config: CalibrationConfig | None = None,
    prefixes: Prefixes | None = None,
) -> Calibration:
    """Score the candidates on pseudo queries from a sample of the `count` rows; choose by the rule.

    Too few pseudo queries (one-sentence documents without titles, a tiny index) keep the default,
    with the reason recorded.
    """
    config = config or CalibrationConfig()
    start = time.perf_counter()
    rows = list(range(count))
    if count > config.documents:
        rows = sorted(random.Random(config.seed).sample(rows, config.documents))
    documents = documents_of_rows(rows)
    try:
        task = pseudo_task(documents, config)
    except InputError:  # no document gives any pseudo query
        task = PseudoTask([], documents, [])
    if len(task.queries) < config.min_queries:
        method, alpha = default_choice()
        reason = f"{len(task.queries)} pseudo queries, fewer than {config.min_queries}: the default"
        return Calibration(method, alpha, reason, documents=len(rows), count=count, seed=config.seed)
    table = score_task(task, vectors_of_rows(rows), encoder, lexical_settings, prefixes)
    picked = choose(table)
    queries = {kind: sum(q.kind == kind for q in task.queries) for kind in config.kinds}
    return Calibration(
        picked.method,
        picked.alpha,
        picked.reason,
        table=table,
        queries={k: n for k, n in queries.items() if n},
        documents=len(rows),
        count=count,
        seconds=round(time.perf_counter() - start, 2),
        seed=config.seed,
    )


def calibrate_store(
    store: Any,
    index: Any,
    encoder: Encoder,
    settings: Any,
    config: CalibrationConfig | None = None,
    prefixes: Prefixes | None = None,
) -> Calibration:
    """`calibrate` over an open `DocStore`, its FAISS index and the lexical side's settings."""
    from embedkit.index.search import SearchIndex

    # the index being written is the encoder's own: it records the encoder's model, so a read-back
    # that must embed again (an IVF-PQ index with deletions cannot decode its codes) checks out
    meta = {
        "dim": encoder.dim,
        "model": str(encoder.path),
        "model_fingerprint": encoder.fingerprint,
        **({"passage_prefix": prefixes.passage} if prefixes else {}),
    }
    opened = SearchIndex(Path(), meta, index, store)  # its vector read-back

    def documents(rows: list[int]) -> list[Document]:
        found = store.by_rows(rows)
        return [d if d is not None else Document(f"row-{r}", "") for r, d in zip(rows, found, strict=True)]

    vectors = lambda rows: opened.vectors_of_rows(rows, encoder)  # noqa: E731
    return calibrate(documents, vectors, int(index.ntotal), encoder, settings, config, prefixes)


def calibrate_folder(
    folder: Path,
    index: Any,
    encoder: Encoder,
    settings: Any,
    config: CalibrationConfig | None = None,
    prefixes: Prefixes | None = None,
) -> Calibration:
    """`calibrate_store` on the version folder `folder` (being written) and its FAISS `index`."""
    from embedkit.index.docstore import DocStore
    from embedkit.index.folder import DOCS_FILE

    store = DocStore.open(folder / DOCS_FILE)
    try:
        return calibrate_store(store, index, encoder, settings, config, prefixes)
    finally:
        store.close()


@locked("out")
def calibrate_index(
    out: str | Path,
    model: Encoder | str | Path | None = None,  # None: the index's model
    *,
    device: str = "auto",
    precision: str | None = None,
    config: CalibrationConfig | None = None,
) -> Calibration:
    """Calibrate the index in `out` and record the choice in a new version (`embedkit calibrate`).

    The files are copied unchanged; only the metadata gains the calibration. A kill leaves the old
    version live. An index without a lexical side has nothing to fuse: an `InputError`.
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
    if hasattr(model, "encode"):  # an open encoder: it must run the index's model
        encoder = model
        if encoder.fingerprint != meta["model_fingerprint"] or encoder.dim != meta["dim"]:
            raise InputError(
                f"the encoder's model is not {meta['model']}, the model the index {out} was built with"
            )
    else:
        encoder = open_model_for(meta, model, device, precision)
    if meta.get("passages"):
        raise InputError(
            f"the index {out} holds passages: it is not calibrated and searches with the default fusion "
            "(or --fusion / --alpha)"
        )
    live = index_files_dir(out)
    with new_version(out) as tmp:
        shutil.copytree(live, tmp, ignore=shutil.ignore_patterns(META_FILE, CHECKSUMS), dirs_exist_ok=True)
        index = read_faiss(live / INDEX_FILE, meta)  # checked against the live version's checksums
        calibration = calibrate_folder(tmp, index, encoder, settings, config, recorded_prefixes(meta))
        record = IndexMeta.from_json(meta, tmp / META_FILE).updated_now(fusion=calibration.to_json())
        write_json_atomic(tmp / META_FILE, record.to_json())
    return calibration
