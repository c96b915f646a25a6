"""In-domain retrieval on an STS file: the protocol of DiffCSE (Chuang et al. 2022, "DiffCSE:
Difference-based Contrastive Learning for Sentence Embeddings", retrieval on STS-B test), whose
figures InfoCSE (Wu et al. 2022, Table 11) reports beside its own.

- corpus: every sentence of the file, both sides of every pair, duplicates included (STS-B test:
  1,379 pairs, 2,758 sentences); row i is pair i's sentence1, row n + i its sentence2;
- queries: the pairs whose gold score is 5.0 (97 in STS-B test): sentence1 is the query, sentence2
  its target;
- each query ranks the whole corpus by cosine similarity, exactly, without its own row; equal
  scores are ordered by row, ascending; `exclude="text"` also leaves out every other row holding
  the query's text (see below);
- a retrieved sentence whose text equals the target's text counts as the target (the corpus holds
  repeated sentences, which embed identically);
- Recall@k: the share of queries with the target in the top k, x100, reported as `recall@k`.

Published on STS-B test (R@1/5/10): SimCSE 74.23/94.85/95.88, DiffCSE 79.38/96.91/98.97, InfoCSE
80.41/100/100 (InfoCSE Table 11). With only the own row left out, 31 of STS-B test's 97 queries
have their own text again elsewhere in the corpus; that copy scores 1.0 and is ranked first, so
Recall@1 cannot exceed 66/97 = 68.04 for any encoder, below the published figures. Those must
therefore come from a corpus without the query's copies (deduplicated, or `exclude="text"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from embedkit.errors import InputError
from embedkit.search.exact import exact_top_k

GOLD_SCORE = 5.0  # the top of the STS scale: the two sentences mean the same (Cer et al. 2017)
RECALL_KS = (1, 5, 10)
EXCLUDE = ("row", "text")  # leave out the query's own row, or every row holding the query's text


@dataclass(frozen=True)
class StsRetrievalTask:
    """The corpus and the queries of one STS file."""

    sentences: list[str]  # the corpus, by row: sentence1 of every pair, then sentence2 of every pair
    queries: list[int]  # the corpus row of each query (a sentence1)
    targets: list[int]  # the corpus row of each query's target (the same pair's sentence2)


@runtime_checkable
class StsPairs(Protocol):
    """What a task is built from besides triples: `StsData`'s three columns, in file order."""

    @property
    def sentences1(self) -> Sequence[str]: ...

    @property
    def sentences2(self) -> Sequence[str]: ...

    @property
    def scores(self) -> Sequence[float] | np.ndarray: ...


def sts_retrieval_task(source: str | Path | Any) -> StsRetrievalTask:
    """The task of an STS file (read with `read_sts`), of `StsData`, or of (s1, s2, score) triples."""
    if isinstance(source, StsRetrievalTask):
        return source
    pairs: Any = source  # `StsPairs` (`StsData`, or any with its three columns), or triples
    if isinstance(source, (str, Path)):
        from embedkit.data.sts import read_sts

        pairs = read_sts(source)
    if isinstance(pairs, StsPairs):
        first, second, scores = list(pairs.sentences1), list(pairs.sentences2), list(pairs.scores)
    else:
        triples = list(pairs)
        if any(len(triple) != 3 for triple in triples):
            raise InputError("STS pairs must be (sentence1, sentence2, score) triples")
        first, second, scores = ([t[i] for t in triples] for i in range(3))
    n = len(first)
    if n == 0:
        raise InputError("no STS pairs to build a retrieval task from")
    queries = [i for i, score in enumerate(scores) if float(score) == GOLD_SCORE]
    if not queries:
        raise InputError(f"no pair has the gold score {GOLD_SCORE}: nothing to query")
    return StsRetrievalTask([*map(str, first), *map(str, second)], queries, [n + i for i in queries])


def _excluded(task: StsRetrievalTask, query: int, exclude: str) -> set[int]:
    if exclude == "row":
        return {query}
    if exclude == "text":
        return {row for row, text in enumerate(task.sentences) if text == task.sentences[query]}
    raise InputError(f"unknown exclusion {exclude!r}: use {', '.join(EXCLUDE)}")


def rank_rows(
    task: StsRetrievalTask, vectors: np.ndarray, depth: int, exclude: str = "row"
) -> list[list[int]]:
    """Each query's `depth` best corpus rows by inner product of `vectors` (one per row), the
    query's own row (`exclude="text"`: every row of its text) left out, ties by row ascending."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(task.sentences):
        raise InputError(f"need one vector per corpus sentence ({len(task.sentences)}), got {vectors.shape}")
    left_out = [_excluded(task, query, exclude) for query in task.queries]
    if not left_out:
        return []
    wanted = depth + max(len(rows) for rows in left_out)
    _, found = exact_top_k(vectors[task.queries], vectors, wanted)
    return [
        [int(r) for r in rows if int(r) not in out][:depth] for rows, out in zip(found, left_out, strict=True)
    ]


def recall_from_rankings(
    task: StsRetrievalTask,
    rankings: Sequence[Sequence[int]],
    ks: Sequence[int] = RECALL_KS,
    exclude: str = "row",
) -> dict[str, float]:
    """`recall@k` x100 for rankings of corpus rows, one per query, best first.

    The rows `exclude` leaves out are skipped wherever they appear, so a ranking may include them.
    """
    if len(rankings) != len(task.queries):
        raise InputError(f"{len(rankings)} rankings for {len(task.queries)} queries")
    first_hit = []  # 1-based rank of the first row holding the target's text, or None
    for query, target, ranking in zip(task.queries, task.targets, rankings, strict=True):
        target_text = task.sentences[target]
        left_out = _excluded(task, query, exclude)
        kept = [row for row in ranking if row not in left_out]
        first_hit.append(
            next((r for r, row in enumerate(kept, 1) if task.sentences[row] == target_text), None)
        )
    return {
        f"recall@{k}": 100.0 * sum(1 for hit in first_hit if hit is not None and hit <= k) / len(first_hit)
        for k in ks
    }


def evaluate_sts_retrieval(
    encoder: Any,
    path_or_pairs: str | Path | Any,
    ks: Sequence[int] = RECALL_KS,
    batch_size: int = 64,
    exclude: str = "row",
) -> dict[str, float]:
    """Recall@1/5/10 (x100) of `encoder` on one STS file, by the protocol of the module docstring.

    `encoder`: anything with `.encode(texts, batch_size=..., normalize=True)` returning float32
    [n, dim]; `path_or_pairs`: an STS file, `StsData`, or (sentence1, sentence2, score) triples;
    `exclude`: "row" (the query's own row) or "text" (every row holding the query's text).
    """
    if not ks or min(ks) < 1:
        raise InputError(f"recall cut-offs must be >= 1, got {list(ks)}")
    if exclude not in EXCLUDE:
        raise InputError(f"unknown exclusion {exclude!r}: use {', '.join(EXCLUDE)}")
    task = sts_retrieval_task(path_or_pairs)
    vectors = encoder.encode(task.sentences, batch_size=batch_size, normalize=True)
    return recall_from_rankings(task, rank_rows(task, vectors, max(ks), exclude), ks, exclude)
