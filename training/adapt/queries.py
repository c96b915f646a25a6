"""Label-free training data for `embedkit adapt`: pseudo queries cut from an index's documents, and
the candidates the index's own hybrid ranking gives each of them (no torch here).

Three kinds of pseudo query (ict, title, terms), none of which needs a generator or a label: made
by `embedkit.evaluation.pseudo_kinds`, which the index's fusion calibration uses too.

The teacher's ranking of each query (`mine_candidates`) becomes the candidate list of listwise
distillation: the source document plus the teacher's top `CANDIDATES`, and hard negatives from
teacher ranks `HARD_NEGATIVE_RANKS`, both without the source's near duplicates (a corpus often holds
a document twice; ranking one copy above the other teaches nothing true).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from embedkit.evaluation.pseudo_kinds import (  # the generator, shared with the index's fusion calibration
    QUERY_KINDS,
    PseudoQuery,
    make_pseudo_queries,
    salient_terms,
    words,
)

CANDIDATES = 30  # teacher hits the student's ranking is distilled over (RocketQAv2 lists: 1 + 127)
HARD_NEGATIVE_RANKS = (10, 50)  # 1-based teacher ranks whose hits serve as hard negatives
NEAR_DUPLICATE = 0.9  # word-set Jaccard above which a hit counts as a copy of the source


@dataclass(frozen=True)
class Candidates:
    """What the teacher's ranking of one query gives training (rows are the index's FAISS rows)."""

    rows: list[int]  # the source first, then the teacher's top CANDIDATES hits (copies of it left out)
    scores: list[float]  # the teacher's score of each row; the source's is set by `mine_candidates`
    hard_negatives: list[int]  # teacher ranks HARD_NEGATIVE_RANKS, without the source and its copies


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def mine_candidates(
    ranking: Sequence[tuple[int, float]],
    source: int,
    copies: set[int],
    source_margin: float,
    candidates: int = CANDIDATES,
    negative_ranks: tuple[int, int] = HARD_NEGATIVE_RANKS,
) -> Candidates:
    """The candidate list and hard negatives of one query from the teacher's `ranking` (row, score).

    `copies`: rows that duplicate the source (`near_duplicates`); they are neither candidates nor
    negatives. The source is a positive by construction, whatever rank the teacher gave it: its
    teacher score is `source_margin` above the best other candidate's (for an ICT query the index
    still holds the sentence, so the teacher's own score of the source is inflated by exact overlap).
    """
    others = [(row, score) for row, score in ranking if row != source and row not in copies]
    top = others[:candidates]
    best = max((s for _, s in top), default=0.0)
    low, high = negative_ranks
    negatives = [
        row
        for rank, (row, _) in enumerate(ranking, 1)
        if low <= rank <= high and row != source and row not in copies
    ]
    return Candidates(
        rows=[source, *(r for r, _ in top)],
        scores=[best + source_margin, *(s for _, s in top)],
        hard_negatives=negatives,
    )


def near_duplicates(source: int, rows: Sequence[int], word_sets: dict[int, set[str]]) -> set[int]:
    """The rows among `rows` whose word set is at least `NEAR_DUPLICATE` Jaccard-similar to the source's."""
    own = word_sets[source]
    return {r for r in rows if r != source and jaccard(own, word_sets[r]) >= NEAR_DUPLICATE}


def unique_source_batches(
    sources: Sequence[int], batch_size: int, seed: int, epoch: int
) -> Iterator[list[int]]:
    """Batches of query indices, shuffled by (seed, epoch), no two queries of one document in a batch.

    Another query of the same document would be an in-batch negative that is really a positive. A
    query whose document is already in the batch waits for the next one; a last batch of fewer than
    two queries is dropped (it has no in-batch negative).
    """
    pending = list(range(len(sources)))
    random.Random(f"{seed}-{epoch}").shuffle(pending)
    while pending:
        batch: list[int] = []
        seen: set[int] = set()
        later: list[int] = []
        for i in pending:
            if len(batch) < batch_size and sources[i] not in seen:
                batch.append(i)
                seen.add(sources[i])
            else:
                later.append(i)
        if len(batch) < 2:
            return
        yield batch
        pending = later


def endless_batches(sources: Sequence[int], batch_size: int, seed: int) -> Iterator[list[int]]:
    """`unique_source_batches` of epoch 0, 1, 2, ... one after the other, for as many steps as asked."""
    epoch = 0
    while True:
        yield from unique_source_batches(sources, batch_size, seed, epoch)
        epoch += 1


def by_kind(queries: Sequence[PseudoQuery]) -> str:
    """`12 ict, 12 title, 12 terms`: how many queries of each kind, in the order the kinds come."""
    kinds: dict[str, int] = {}
    for q in queries:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    return ", ".join(f"{n:,} {k}" for k, n in kinds.items())


__all__ = [
    "CANDIDATES",
    "words",
    "HARD_NEGATIVE_RANKS",
    "QUERY_KINDS",
    "Candidates",
    "PseudoQuery",
    "by_kind",
    "endless_batches",
    "make_pseudo_queries",
    "mine_candidates",
    "near_duplicates",
    "salient_terms",
    "unique_source_batches",
]
