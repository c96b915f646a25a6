"""The re-ranking stage: a hand-made scorer's order, and `embedkit search --rerank` against
sentence-transformers' `CrossEncoder.predict` over the first hits of the same search."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.data.document import Document
from embedkit.errors import InputError
from embedkit.search.hits import Hit
from embedkit.search.rerank import Rerank


@dataclass
class TableScorer:
    """Scores from a table of texts: the expected order is read off by hand."""

    table: dict[str, float]

    def score(self, query, texts, raw=False):
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def _hits(*texts: str) -> list[Hit]:
    return [
        Hit(f"d{i}", 1.0 - i / 10, i, Document(f"d{i}", t), dense_score=1.0 - i / 10)
        for i, t in enumerate(texts)
    ]


def test_the_first_depth_hits_are_ordered_by_the_scorer_and_cut_to_k():
    scorer = TableScorer({"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.99})
    [hits] = Rerank(scorer, depth=3, k=2)(["q"], [_hits("a", "b", "c", "d")])
    assert [h.id for h in hits] == ["d1", "d2"]  # d (0.99) is past the depth: never scored
    assert [h.rerank_score for h in hits] == pytest.approx([0.9, 0.5])
    assert [h.score for h in hits] == pytest.approx([0.9, 0.5])
    assert [h.dense_score for h in hits] == pytest.approx([0.9, 0.8])  # the first search's, kept


def test_hits_past_the_depth_follow_in_their_first_order():
    scorer = TableScorer({"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.99})
    [hits] = Rerank(scorer, depth=2, k=4)(["q"], [_hits("a", "b", "c", "d")])
    assert [h.id for h in hits] == ["d1", "d0", "d2", "d3"]
    assert [h.rerank_score for h in hits][2:] == [None, None]
    assert [h.score for h in hits] == pytest.approx([0.9, 0.1, -0.9, -1.9])  # score order is list order


def test_a_depth_below_one_is_refused():
    with pytest.raises(InputError, match="--rerank-depth must be at least 1"):
        Rerank(TableScorer({}), depth=0)


DOCS = [
    ("shock", "shock wave on the wing at high mach number"),
    ("", "heat transfer in the boundary layer"),
    ("", "the cat eats food on the beach"),
    ("drag", "pressure and drag of a small body"),
    ("", "the patient was given a drug for the disease"),
    ("", "a man is playing guitar on the beach"),
    ("", "legal contract of the court"),
]
QUERY = "shock wave drag on the wing"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    from embedkit.cli.app import app

    folder = tmp_path_factory.mktemp("rerank")
    corpus = folder / "docs.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": t, "text": x}) + "\n" for i, (t, x) in enumerate(DOCS))
    )
    result = CliRunner().invoke(
        app, ["index", str(corpus), "--out", str(folder / "idx"), "--model", str(tiny_bert)]
    )
    assert result.exit_code == 0, result.output
    return folder / "idx"


def _search(index: Path, *args: str) -> list[dict]:
    from embedkit.cli.app import app

    args = ("--include", "title,text,scores", *args)  # the documents' text, which the cross-encoder reads
    result = CliRunner().invoke(app, ["search", str(index), QUERY, "--json", "--device", "cpu", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["hits"]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_search_rerank_orders_the_first_hits_as_cross_encoder_predict(index, tiny_cross_encoder, mode):
    st = pytest.importorskip("sentence_transformers")
    first = _search(index, "--mode", mode, "-k", "5")
    texts = [f"{h['title']} {h['text']}".strip() for h in first]
    expected = st.CrossEncoder(str(tiny_cross_encoder), device="cpu").predict([(QUERY, t) for t in texts])
    order = np.argsort(-expected, kind="stable")[:3]
    hits = _search(
        index, "--mode", mode, "-k", "3", "--rerank", str(tiny_cross_encoder), "--rerank-depth", "5"
    )
    assert [h["id"] for h in hits] == [first[i]["id"] for i in order]
    assert list(order) != [0, 1, 2]  # the cross-encoder re-orders: a stage that did nothing fails
    np.testing.assert_allclose([h["rerank_score"] for h in hits], expected[order], atol=2e-6)
    assert [h["dense_score"] for h in hits] == [first[i]["dense_score"] for i in order]


def test_search_rerank_refuses_an_embedding_model(index, tiny_bert):
    from embedkit.cli.app import app

    result = CliRunner().invoke(app, ["search", str(index), QUERY, "--rerank", str(tiny_bert)])
    assert result.exit_code == 2
    assert "is not a cross-encoder" in result.output


def test_eval_retrieval_reranks_the_first_hits_of_its_run(tmp_path: Path, tiny_cross_encoder: Path):
    """The evaluator's run with a cross-encoder: each query's first 5 documents of the plain run,
    ordered by `CrossEncoder.predict`, then the rest of the plain run in its order."""
    st = pytest.importorskip("sentence_transformers")
    from eval_data import QUERIES, HashEncoder, write_beir

    from embedkit.encode.cross_encoder import CrossEncoderModel
    from embedkit.evaluation import RetrievalEvaluator

    folder = write_beir(tmp_path / "beir")
    corpus = {r["_id"]: r for r in map(json.loads, (folder / "corpus.jsonl").read_text().splitlines())}
    plain = RetrievalEvaluator(folder, mode="dense").evaluate(HashEncoder()).run
    scorer = CrossEncoderModel(tiny_cross_encoder, device="cpu")
    run = RetrievalEvaluator(folder, rerank=scorer, rerank_depth=5, mode="dense").evaluate(HashEncoder()).run
    reference = st.CrossEncoder(str(tiny_cross_encoder), device="cpu")
    for qid, query in QUERIES.items():
        first = sorted(plain[qid], key=plain[qid].get, reverse=True)
        texts = [f"{corpus[d]['title']} {corpus[d]['text']}".strip() for d in first[:5]]
        expected = reference.predict([(query, t) for t in texts])
        head = [first[i] for i in np.argsort(-expected, kind="stable")]
        assert sorted(run[qid], key=run[qid].get, reverse=True) == head + first[5:]
