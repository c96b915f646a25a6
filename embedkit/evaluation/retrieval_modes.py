"""One BEIR evaluation in several search modes side by side: what `embedkit eval retrieval` runs.

The index (a folder, or one the caller opened: a pushed collection is opened by the caller, since
evaluation does not reach the remote package), the model (the index's own unless another is
named), the prefixes (the index's recorded ones, else those asked for or the model card's) and the
re-ranker are chosen here, once for every mode, and the corpus is embedded once for all of them
(`CachingEncoder`). Each mode is a `RetrievalEvaluator`, so each is the search pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.encode.protocol import Encoder
from embedkit.encode.runtime import Runtime
from embedkit.evaluation.retrieval import RetrievalEvaluator, RetrievalReport
from embedkit.index.search import SearchIndex
from embedkit.search.rerank import DEFAULT_RERANK_DEPTH


@dataclass(frozen=True)
class ModesEvaluated:
    """The reports, keyed by the mode each evaluated (the one asked for, else what `embedkit
    search` runs), and the encoder that embedded (its folder and identity name the run)."""

    reports: dict[str, RetrievalReport]
    encoder: Encoder


def evaluate_modes(
    beir_dir: str | Path,
    modes: Sequence[str | None],
    *,
    index: str | Path | SearchIndex | None = None,
    model: str | Path | None = None,
    runtime: Runtime | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    rerank: str | Path | None = None,
    rerank_depth: int = DEFAULT_RERANK_DEPTH,
    **settings: Any,  # RetrievalEvaluator's: split, ignore_identical_ids, batch_size, progress, fusion, alpha
) -> ModesEvaluated:
    """Evaluate each of `modes` (None: what `embedkit search` runs) on `beir_dir`, over `index`
    (None: exact search over the corpus in memory). A bad index folder is an `InputError` before
    a model loads; prefixes given beside an index that recorded others, an `InputError`."""
    from embedkit.encode.caching import CachingEncoder
    from embedkit.encode.loading import load_encoder
    from embedkit.encode.prefixes import check_recorded, recorded_prefixes, resolve_prefixes
    from embedkit.index.folder import open_model_for, read_index_meta

    runtime = runtime or Runtime()
    searched: Path | SearchIndex | None = None
    meta = None
    if isinstance(index, SearchIndex):
        searched, meta = index, index.meta
    elif index is not None:
        searched = Path(index)
        meta = read_index_meta(searched)  # fail on a bad folder before loading anything
    scorer = None
    if rerank is not None:
        from embedkit.encode.cross_encoder import CrossEncoderModel

        scorer = CrossEncoderModel(rerank, device=runtime.device)
    evaluators = [
        RetrievalEvaluator(
            beir_dir, index=searched, mode=m, rerank=scorer, rerank_depth=rerank_depth, **settings
        )
        for m in modes
    ]
    if meta is None:
        encoder: Encoder = load_encoder(model, runtime=runtime)
        prefixes = resolve_prefixes(encoder.path, query_prefix, passage_prefix)
    else:
        encoder = open_model_for(meta, model, runtime)  # the index's model unless `model`
        prefixes = recorded_prefixes(meta)
        check_recorded(prefixes, query_prefix, passage_prefix, "index")
    for evaluator in evaluators:
        evaluator.prefixes = prefixes
    cached = CachingEncoder(encoder)  # several modes embed the corpus once
    reports = {r.mode: r for r in (evaluator.evaluate(cached) for evaluator in evaluators)}
    return ModesEvaluated(reports, cached)
