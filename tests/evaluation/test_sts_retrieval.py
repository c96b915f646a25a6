"""The DiffCSE STS retrieval protocol on a hand-built file whose ranks are worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from embedkit.errors import InputError
from embedkit.evaluation.sts_retrieval import (
    evaluate_sts_retrieval,
    rank_rows,
    recall_from_rankings,
    sts_retrieval_task,
)

PAIRS = [
    ("a cat sits", "a cat is sitting", 5.0),  # query 0: row 0, target row 6
    ("a dog runs", "a dog is running", 5.0),  # query 1: row 1, target row 7
    ("a man cooks", "a man is cooking", 3.0),
    ("a bird flies", "a plane flies", 5.0),  # query 2: row 3, target row 9
    ("a cat is sitting", "the sun shines", 1.0),  # row 4 repeats query 0's target text
    ("a dog runs", "a horse gallops", 2.0),  # row 5 repeats query 1's own text
]
# Unit vectors at these angles (degrees): cosine similarity is the cosine of the angle between.
ANGLES = {
    "a cat sits": 0,
    "a man cooks": 10,
    "a cat is sitting": 30,
    "a dog runs": 90,
    "a horse gallops": 95,
    "a dog is running": 100,
    "a bird flies": 180,
    "a plane flies": 200,
    "the sun shines": 270,
    "a man is cooking": 300,
}
# Worked out by hand, own row left out:
# query 0 (0 deg): row 2 (10 deg), then rows 4 and 6 (30 deg, tied: row order). Row 4's text is the
#   target's, so the first hit is at rank 2, although the target row itself is at rank 3.
# query 1 (90 deg): row 5 (the query's own text, 0 deg away, not excluded: it is another row), row 11
#   (5 deg), row 7 (10 deg, the target): first hit at rank 3.
# query 2 (180 deg): row 9 (20 deg, the target): rank 1.
FIRST_HITS = [2, 3, 1]


class FakeEncoder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts, batch_size: int = 64, normalize: bool = True) -> np.ndarray:
        self.calls.append(list(texts))
        radians = [math.radians(ANGLES[t]) for t in texts]
        return np.array([[math.cos(r), math.sin(r)] for r in radians], dtype=np.float32)


def write_sts(path: Path, pairs) -> Path:
    lines = ["sentence1\tsentence2\tscore", *(f"{a}\t{b}\t{s:.3f}" for a, b, s in pairs)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expected_recall(k: int) -> float:
    return 100.0 * sum(1 for hit in FIRST_HITS if hit <= k) / len(FIRST_HITS)


def test_task_layout() -> None:
    task = sts_retrieval_task(PAIRS)
    assert task.sentences[:6] == [p[0] for p in PAIRS] and task.sentences[6:] == [p[1] for p in PAIRS]
    assert task.queries == [0, 1, 3]
    assert task.targets == [6, 7, 9]


def test_ranks_by_hand(tmp_path: Path) -> None:
    encoder = FakeEncoder()
    result = evaluate_sts_retrieval(encoder, write_sts(tmp_path / "sts.tsv", PAIRS), ks=(1, 2, 3))
    assert result == pytest.approx({f"recall@{k}": expected_recall(k) for k in (1, 2, 3)})
    assert result["recall@1"] == pytest.approx(100 / 3) and result["recall@2"] == pytest.approx(200 / 3)
    assert encoder.calls == [[p[0] for p in PAIRS] + [p[1] for p in PAIRS]]
    task = sts_retrieval_task(PAIRS)
    rankings = rank_rows(task, FakeEncoder().encode(task.sentences), depth=3)
    assert rankings == [[2, 4, 6], [5, 11, 7], [9, 7, 11]]


def test_default_cutoffs_and_sources_agree(tmp_path: Path) -> None:
    from_pairs = evaluate_sts_retrieval(FakeEncoder(), PAIRS)
    assert from_pairs == pytest.approx({"recall@1": 100 / 3, "recall@5": 100.0, "recall@10": 100.0})
    assert evaluate_sts_retrieval(FakeEncoder(), str(write_sts(tmp_path / "s.tsv", PAIRS))) == from_pairs


def test_excluding_the_query_text_skips_its_copies() -> None:
    # Query 1's text is also row 5: left out too, row 11 then row 7 (the target) -> rank 2.
    task = sts_retrieval_task(PAIRS)
    vectors = FakeEncoder().encode(task.sentences)
    assert rank_rows(task, vectors, depth=3, exclude="text") == [[2, 4, 6], [11, 7, 4], [9, 7, 11]]
    result = evaluate_sts_retrieval(FakeEncoder(), PAIRS, ks=(1, 2), exclude="text")
    assert result == pytest.approx({"recall@1": 100 / 3, "recall@2": 100.0})
    assert recall_from_rankings(task, [[0, 2, 4], [5, 1, 7], [9]], ks=(1,), exclude="text")["recall@1"] == (
        pytest.approx(200 / 3)
    )
    with pytest.raises(InputError, match="exclusion"):
        evaluate_sts_retrieval(FakeEncoder(), PAIRS, exclude="pair")


def test_own_row_is_skipped_even_when_its_text_is_the_targets() -> None:
    # An identical pair: the query's own row holds the target's text but never counts.
    task = sts_retrieval_task([("same words", "same words", 5.0), ("other", "more", 0.0)])
    assert recall_from_rankings(task, [[0, 1, 2]], ks=(1, 2)) == {"recall@1": 0.0, "recall@2": 100.0}
    assert recall_from_rankings(task, [[0, 2]], ks=(1,)) == {"recall@1": 100.0}


def test_bad_input_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="gold score 5.0"):
        sts_retrieval_task([("a", "b", 4.9)])
    with pytest.raises(InputError, match="no STS pairs"):
        sts_retrieval_task([])
    with pytest.raises(InputError):
        evaluate_sts_retrieval(FakeEncoder(), tmp_path / "missing.tsv")
    task = sts_retrieval_task(PAIRS)
    with pytest.raises(InputError, match="rankings"):
        recall_from_rankings(task, [[1]])
    with pytest.raises(InputError, match="cut-offs"):
        evaluate_sts_retrieval(FakeEncoder(), PAIRS, ks=(0,))


def test_stsb_test_split_sizes(shared_data: Path) -> None:
    task = sts_retrieval_task(shared_data / "sts" / "stsb-test.tsv")
    assert len(task.sentences) == 2758
    assert len(task.queries) == 97
