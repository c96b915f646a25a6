"""`--dev-pseudo`: checkpoint selection on pseudo queries held out of the training corpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.corpus import load_sentences, read_documents
from embedkit.errors import InputError
from embedkit.evaluation.pseudo_queries import build_pseudo_queries, evaluate_pseudo, normalize_text
from embedkit.training.config import TrainConfig
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def documents(tmp_path: Path, sentences: list[str]) -> Path:
    """30 documents of 2 to 5 sentences, as JSON lines."""
    words = sorted({w.strip(",!") for s in sentences for w in s.split()})
    rng = np.random.default_rng(3)
    path = tmp_path / "docs.jsonl"
    with path.open("w") as f:
        for d in range(30):
            sentences = [
                f"Report {d} part {s} finds " + " ".join(rng.choice(words, size=6)) + "."
                for s in range(int(rng.integers(2, 6)))
            ]
            f.write(json.dumps({"_id": f"d{d}", "text": " ".join(sentences)}) + "\n")
    return path


def config(base: Path, **changes: object) -> TrainConfig:
    defaults = {"base_model": str(base), "batch_size": 4, "epochs": 100, "device": "cpu"}
    return TrainConfig(**{**defaults, **changes})  # type: ignore[arg-type]


class SentenceTransformerEncoder:
    """An independent encoder for the reference scores: sentence-transformers on the saved folder."""

    def __init__(self, folder: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(folder), device="cpu")

    def encode(self, texts, batch_size=64, normalize=None, progress=False):
        return self.model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True)


def test_pseudo_queries_are_held_out_before_the_limit(documents: Path) -> None:
    pseudo = build_pseudo_queries(read_documents(documents), 6, seed=1)
    everything = load_sentences(documents, split_sentences=True).sentences
    sample = load_sentences(documents, split_sentences=True, limit=40, seed=0, exclude=pseudo.exclude)
    queries = [normalize_text(q.text) for q in pseudo.queries]
    # naive reference: a training sentence is held out when it contains a query sentence
    held = [s for s in everything if any(q in normalize_text(s) for q in queries)]
    assert len(held) >= len(queries)
    assert sample.stats.held_out == len(held)
    assert len(sample.sentences) == 40  # --limit counts training sentences, after the hold-out
    assert not any(q in normalize_text(s) for s in sample.sentences for q in queries)


def test_dev_pseudo_scores_the_base_and_keeps_the_best_checkpoint(
    tmp_path: Path, tiny_bert: Path, documents: Path
) -> None:
    cfg = config(
        tiny_bert,
        method="simcse",
        max_steps=6,
        eval_steps=2,
        learning_rate=3e-3,
        split_sentences=True,
        dev_pseudo=8,
    )
    out = tmp_path / "out"
    result = train(documents, out, cfg, progress=False)

    pseudo = build_pseudo_queries(read_documents(documents), 8, seed=cfg.seed)
    assert len(pseudo.queries) == 8

    def reference(folder: Path) -> float:
        return evaluate_pseudo(SentenceTransformerEncoder(folder), pseudo)["ndcg@10"]

    assert result.base_dev_score == pytest.approx(reference(tiny_bert), abs=1e-5)
    assert result.dev_score == pytest.approx(reference(out), abs=1e-5)  # the saved one is the best
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluated = {r["step"]: r["dev_ndcg@10"] for r in records if "dev_ndcg@10" in r}
    assert sorted(evaluated) == [0, 2, 4, 6]
    trained = {s: v for s, v in evaluated.items() if s}
    assert result.dev_score == max(trained.values()) and trained[result.best_step] == result.dev_score
    assert result.dev_label == "dev pseudo ndcg@10"

    meta = json.loads((out / "embedkit.json").read_text())
    assert meta["dev"]["pseudo_queries"] == 8 and meta["dev"]["fingerprint"] == pseudo.fingerprint
    assert meta["dev"]["metric"] == "ndcg@10"
    assert meta["data"]["stats"]["held_out"] >= 8
    everything = load_sentences(documents, split_sentences=True).sentences
    assert result.sentences == len(everything) - meta["data"]["stats"]["held_out"]


def test_dev_pseudo_input_errors(tmp_path: Path, tiny_bert: Path, documents: Path) -> None:
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\na b\tc d\t1\ne f\tg h\t2\n")
    with pytest.raises(InputError, match="give one of dev_sts, dev_pseudo and dev_retrieval"):
        train(documents, tmp_path / "a", config(tiny_bert, dev_pseudo=4, dev_sts=str(dev)), progress=False)
    with pytest.raises(InputError, match="file or BEIR folder"):
        train(["one two", "three four"], tmp_path / "b", config(tiny_bert, dev_pseudo=4), progress=False)
    lines = tmp_path / "lines.txt"
    lines.write_text("one sentence per line here.\nand another one.\n")
    with pytest.raises(InputError, match="multi-sentence"):
        train(lines, tmp_path / "c", config(tiny_bert, dev_pseudo=4), progress=False)
    assert not any((tmp_path / n).exists() for n in "abc")

    runner = CliRunner()
    args = ["train", str(documents), "--out", str(tmp_path / "d"), "--base", str(tiny_bert), "--quiet"]
    both = runner.invoke(app, [*args, "--dev-pseudo", "4", "--dev-sts", str(dev)])
    assert both.exit_code == 2 and "give one of dev_sts, dev_pseudo and dev_retrieval" in both.stderr
    negative = runner.invoke(app, [*args, "--dev-pseudo", "-1"])
    assert negative.exit_code == 2
    assert not (tmp_path / "d").exists()
