"""The label-free dev signals `embedkit adapt` can select a step on, and the rule that keeps the base.

Held-out pseudo queries (a sentence cut from its document, a title, salient terms) share their
document's words, so their nDCG@10 rewards what BM25 rewards: on four collections a model selected
on them learned the lexical teacher's habits and lost judged dense nDCG@10 where the lexical side is
weak. The signals, each a score of the student at a dev evaluation (higher is better):

- `pseudo`: the held-out pseudo queries' nDCG@10, each with its document's remaining text as the one
  relevant target (`student.dev_ndcg`);
- `rare-cut`: the same queries with their rare words removed (words found in fewer than
  `RARE_SHARE` of the documents): what is left must be matched by meaning, not by a shared rare term;
- `word-drop`: the same queries with a third of their words dropped (seeded per query): a paraphrase
  the cheap way, so that no single shared word carries the match;
- `base-overlap`: the mean share of the base model's dense top 10 that the student's top 10 keeps, on
  the same queries: how far the student has moved from the base (1.0 at step 0);
- `judged`: the user's judged queries' nDCG@10 (`--dev-retrieval`).

(A fourth candidate, the gap between the student's dense score and the index's hybrid score on
pseudo queries, ranks the steps of one run exactly as `pseudo` does, since the hybrid score does not
move with the student: it cannot tell steps apart that `pseudo` does not.)

`kept_step` applies the rule: the best step by the selected signal is kept only when it gains at
least `margin` over the base, and, for the label-free signals, when the student still keeps
`min_base_overlap` of the base's top 10 (0 by default: the measured runs that gained moved as far
from the base as those that lost, so the overlap cannot tell them apart). Measured against judged
queries by `benchmarks/adapt_signals.py`: only `word-drop` rose more on the runs that gained than on
those that lost, hence the default (`config.DEFAULT_SELECT`, `DEFAULT_MARGIN`; docs/training.md
"Which step adapt keeps").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from embedkit.evaluation.pseudo_kinds import PseudoQuery, words

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI reads SIGNALS without it
    import numpy as np

SIGNALS: dict[str, str] = {  # --select name -> the label its score is reported under
    "pseudo": "dev pseudo ndcg@10",
    "rare-cut": "dev rare-cut ndcg@10",
    "word-drop": "dev word-drop ndcg@10",
    "base-overlap": "base overlap@10",
    "judged": "dev retrieval ndcg@10",
}
LABEL_FREE = ("pseudo", "rare-cut", "word-drop")  # the signals a step can be selected on without labels
RARE_SHARE = 0.01  # a word in fewer than 1% of the documents is rare (Cranfield: under 14 of 1,400)
MIN_WORDS_LEFT = 3  # a query left with fewer words after the cut is dropped from `rare-cut`, `word-drop`
DROP_SHARE = 1 / 3  # share of a query's words `word-drop` removes


def _enough(text: str) -> str | None:
    """`text`, or None when it holds fewer than `MIN_WORDS_LEFT` content words."""
    return text if len(words(text)) >= MIN_WORDS_LEFT else None


def cut_rare_words(text: str, df: Counter[str], n_docs: int, share: float = RARE_SHARE) -> str | None:
    """`text` without its rare words (in fewer than `share` of the `n_docs` documents), or None when
    fewer than `MIN_WORDS_LEFT` words are left. The cut is the fusion calibration's
    (`embedkit.evaluation.fusion_calibration.without_rare_words`), with its threshold as a share."""
    from embedkit.evaluation.fusion_calibration import without_rare_words

    return _enough(without_rare_words(text, df, math.ceil(share * n_docs)))


def drop_words(text: str, seed: int, share: float = DROP_SHARE) -> str | None:
    """`text` with `share` of its whitespace-separated words dropped (which ones: seeded by `seed`),
    or None when fewer than `MIN_WORDS_LEFT` words are left."""
    import random

    tokens = text.split()
    dropped = set(random.Random(seed).sample(range(len(tokens)), round(share * len(tokens))))
    return _enough(" ".join(t for i, t in enumerate(tokens) if i not in dropped))


def rewritten(
    queries: Sequence[PseudoQuery], rewrite: Callable[[int, str], str | None]
) -> tuple[list[PseudoQuery], list[int]]:
    """Each query with its text rewritten by `rewrite(position, text)`, those it returns None for left
    out; and the positions in `queries` of those kept."""
    kept, positions = [], []
    for i, query in enumerate(queries):
        text = rewrite(i, query.text)
        if text is not None:
            kept.append(replace(query, text=text))
            positions.append(i)
    return kept, positions


def rare_cut_queries(
    queries: Sequence[PseudoQuery], df: Counter[str], n_docs: int
) -> tuple[list[PseudoQuery], list[int]]:
    """The queries that keep enough words after the cut, and their positions in `queries`."""
    return rewritten(queries, lambda _, text: cut_rare_words(text, df, n_docs))


def word_drop_queries(queries: Sequence[PseudoQuery]) -> tuple[list[PseudoQuery], list[int]]:
    """The queries that keep enough words with a third dropped (query i seeded by i), and their positions."""
    return rewritten(queries, lambda i, text: drop_words(text, seed=i))


def top_overlap(student_top: np.ndarray, base_top: np.ndarray) -> float:
    """Mean share of each row of `base_top` (Q, k) that the same row of `student_top` holds."""
    import numpy as np

    if len(base_top) == 0:
        return 1.0
    k = base_top.shape[1]
    return float(np.mean([len(set(s) & set(b)) / k for s, b in zip(student_top, base_top, strict=True)]))


def top_rows(query_vectors: np.ndarray, doc_vectors: np.ndarray, k: int = 10) -> np.ndarray:
    """The rows of the `k` highest cosines per query, best first (ties by row), (Q, k)."""
    from embedkit.search.exact import exact_top_k

    return exact_top_k(query_vectors, doc_vectors, k)[1]


def kept_step(
    history: Sequence[tuple[int, dict[str, float]]],
    base: dict[str, float],
    select: str,
    margin: float,
    min_overlap: float,
    force: bool = False,
) -> int | None:
    """The step whose model is kept, or None for the base (see the module's docstring).

    `history` is (step, scores by label) at each dev evaluation; the best is the first step with the
    highest selected score. `force` keeps the best step even when the base scores higher.
    """
    label = SIGNALS[select]
    if not history:
        return None
    step, scores = max(history, key=lambda item: (item[1][label], -item[0]))
    if force:
        return step
    if scores[label] - base[label] < margin or math.isclose(scores[label], base[label]):
        return None
    overlap = scores.get(SIGNALS["base-overlap"])
    if select in LABEL_FREE and overlap is not None and overlap < min_overlap:
        return None
    return step


__all__ = [
    "LABEL_FREE",
    "RARE_SHARE",
    "SIGNALS",
    "cut_rare_words",
    "drop_words",
    "kept_step",
    "rare_cut_queries",
    "rewritten",
    "top_overlap",
    "top_rows",
    "word_drop_queries",
]
