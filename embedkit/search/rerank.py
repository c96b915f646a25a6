"""The re-ranking stage: a cross-encoder's scores over the first hits of a search.

`Rerank` is the search pipeline's last stage (`SearchRequest.rerank`): the first `depth` hits of
each query are scored by a cross-encoder (`embedkit.encode.cross_encoder`) on the query and the
document's title + text (the hit's best passage, in an index of passages), ordered by that score,
and the first `k` returned. A search that re-ranks asks the stages before it for
`candidates` hits (at least `depth`). `embedkit search --rerank` and the server's `/search`
run this stage; `POST /rerank` scores the texts a client sends with the same model.

A re-ranked hit's `score` is the cross-encoder's (`rerank_score`), its `dense_score` and
`lexical_score` stay the first search's; where `k` exceeds `depth`, the hits past the depth follow
in their first order, without a `rerank_score`, each scored 1 below the one before it from the
lowest re-ranked score down, so that score order is list order (an evaluation's run ranks by score).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from embedkit.errors import InputError
from embedkit.search.fusion import bounded_k
from embedkit.search.hits import Hit

if TYPE_CHECKING:
    import numpy as np

    from embedkit.search.request import SearchRequest

# Hits a query's cross-encoder scores by default: half of a hybrid search's 100 fused candidates
# (`FUSION_DEPTH`). A choice of cost (one model run per pair), not of quality: no cross-encoder
# could be measured here.
DEFAULT_RERANK_DEPTH = 50


class PairScorer(Protocol):
    """What the stage needs of a cross-encoder (`CrossEncoderModel`)."""

    def score(self, query: str, texts: Sequence[str], raw: bool = False) -> np.ndarray: ...


@dataclass(frozen=True)
class Rerank:
    """The stage: `scorer` over each query's first `depth` hits, `k` hits returned."""

    scorer: PairScorer
    depth: int = DEFAULT_RERANK_DEPTH
    k: int = 10

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise InputError(f"--rerank-depth must be at least 1, got {self.depth}")
        bounded_k(self.k)

    @property
    def candidates(self) -> int:
        """Hits the search asks its earlier stages for."""
        return max(self.k, self.depth)

    def request(self, request: SearchRequest) -> SearchRequest:
        """`request` (resolved) asking its earlier stages for `candidates` hits, this stage last."""
        k = self.candidates
        return replace(request, k=k, depth=max(request.depth or 0, k), rerank=self)

    def __call__(self, queries: Sequence[str], hits: list[list[Hit]]) -> list[list[Hit]]:
        return [self.one(query, found) for query, found in zip(queries, hits, strict=True)]

    def one(self, query: str, hits: list[Hit]) -> list[Hit]:
        """One query's hits, the first `depth` ordered by the cross-encoder, cut to `k`."""
        import numpy as np  # here: the CLI reads this module's default at start-up

        head, tail = hits[: self.depth], hits[self.depth :]
        if not head:
            return []
        scores = self.scorer.score(query, [hit_text(h) for h in head])
        order = np.argsort(-scores, kind="stable")  # ties keep the first search's order
        scored = [replace(head[i], score=float(scores[i]), rerank_score=float(scores[i])) for i in order]
        floor = float(scores.min())  # hits past the depth score below every re-ranked one
        rest = [replace(h, score=floor - n) for n, h in enumerate(tail, 1)]
        return (scored + rest)[: self.k]


def hit_text(hit: Hit) -> str:
    """What the cross-encoder reads of a hit: its best passage where known, else title + text."""
    if hit.passage is not None:
        return hit.passage.text
    return hit.document.full_text if hit.document is not None else ""
