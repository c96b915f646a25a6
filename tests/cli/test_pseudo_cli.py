"""`embedkit eval pseudo` on a tiny random BERT, checked against a rank-by-hand reference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import typer
from fixture_text import AERO_WORDS
from typer.testing import CliRunner

from embedkit.cli.pseudo import register_into


def _app() -> typer.Typer:
    """The `eval` group as the application builds it: `embedkit eval pseudo ...`."""
    eval_app = typer.Typer()

    @eval_app.callback()
    def _group() -> None:
        """Evaluate a model."""

    register_into(eval_app)
    root = typer.Typer()
    root.add_typer(eval_app, name="eval")
    return root


def _corpus(path: Path, n_docs: int = 30) -> Path:
    rng = np.random.default_rng(1)
    lines = []
    for d in range(n_docs):
        # In-vocabulary words only, so that no document is cut at the tiny model's 64 tokens.
        sentences = [
            " ".join(rng.choice(AERO_WORDS, size=5)).capitalize() + "."
            for _ in range(int(rng.integers(2, 6)))
        ]
        lines.append(json.dumps({"_id": f"doc-{d}", "title": "", "text": " ".join(sentences)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_eval_pseudo_matches_ranks_computed_by_hand(tiny_bert: Path, tmp_path: Path) -> None:
    from embedkit.encode.torch_backend import TorchEncoder

    corpus = _corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "pseudo.json"
    args = ["eval", "pseudo", str(corpus), "--model", str(tiny_bert), "--json", str(out)]
    result = CliRunner().invoke(_app(), [*args, "--queries", "8", "--seed", "4", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "ndcg@10" in result.output
    data = json.loads(out.read_text())
    assert data["task"] == "pseudo" and data["queries"] == 8 and data["documents"] == 30
    queries = data["query_set"]["queries"]
    assert len(queries) == 8

    # Reference: embed, rank every document by cosine, find the target's rank (one relevant doc).
    docs = {json.loads(line)["_id"]: json.loads(line)["text"] for line in corpus.read_text().splitlines()}
    for query in queries:
        docs[query["doc_id"]] = docs[query["doc_id"]].replace(query["text"], " ").strip()
    encoder = TorchEncoder(tiny_bert, device="cpu")
    ids = list(docs)
    doc_vectors = encoder.encode([" ".join(docs[i].split()) for i in ids], normalize=True)
    query_vectors = encoder.encode([q["text"] for q in queries], normalize=True)
    scores = query_vectors @ doc_vectors.T
    ranks = []
    for row, query in zip(scores, queries, strict=True):
        target = ids.index(query["doc_id"])
        ties_before = sum(row[j] == row[target] and ids[j] > ids[target] for j in range(len(ids)))
        ranks.append(1 + int((row > row[target]).sum()) + ties_before)  # trec_eval: ties by id, descending
    expected = {
        "ndcg@10": np.mean([1 / math.log2(r + 1) if r <= 10 else 0.0 for r in ranks]),
        "mrr@10": np.mean([1 / r if r <= 10 else 0.0 for r in ranks]),
        "recall@10": np.mean([r <= 10 for r in ranks]),
    }
    for name, value in expected.items():
        assert data["metrics"][name] == pytest.approx(value, abs=1e-6), name


def test_eval_pseudo_on_one_sentence_per_line_exits_2(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = tmp_path / "lines.txt"
    corpus.write_text("one sentence here.\nanother sentence there.\n")
    result = CliRunner().invoke(_app(), ["eval", "pseudo", str(corpus), "--model", str(tiny_bert)])
    assert result.exit_code == 2
    assert "no document has 3 or more sentences" in result.output
    assert "Traceback" not in result.output
