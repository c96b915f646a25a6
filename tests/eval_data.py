"""Writers of a tiny BEIR folder and a tiny STS file, shared by the evaluation tests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from fixture_text import SENTENCES

DOCS = list(SENTENCES)  # the shared fixture sentences: documents of a tiny BEIR set
QUERIES = {"q1": "wing flow and lift", "q2": "a man plays guitar", "3": "heat transfer", "q4": "the court"}
# Graded judgments. "3" is both a query id and a relevant doc id (BEIR's identical ids); q4's only
# judgment is irrelevant, so q4 scores 0 everywhere but still counts in the mean.
QRELS = {
    "q1": {"0": 2, "7": 1, "2": 1},
    "q2": {"1": 3, "6": 1},
    "3": {"3": 2, "2": 1},
    "q4": {"5": 0},
}


def write_beir(folder: Path) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as f:
        for i, text in enumerate(DOCS):
            f.write(json.dumps({"_id": str(i), "title": "doc" if i % 2 else "", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as f:
        for qid, text in {**QUERIES, "unjudged": "one two"}.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, docs in QRELS.items() for d, g in docs.items()]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def write_sts(path: Path) -> Path:
    """Twelve pairs with tied gold scores."""
    rows = ["sentence1\tsentence2\tscore"]
    for i, first in enumerate(DOCS):
        rows.append(f"{first}\t{DOCS[(i * 5 + 1) % len(DOCS)]}\t{[0, 1.5, 1.5, 3, 5][i % 5]}")
    path.write_text("\n".join(rows) + "\n")
    return path


class HashEncoder:
    """A stand-in model: each text's vector is Gaussian noise seeded by the text's hash.

    Cosines between different texts are spread over about [-0.6, 0.6], so rankings have no near
    ties, unlike a tiny random BERT's, whose vectors all point almost the same way.
    """

    backend = "test"
    device = "cpu"
    dim = 16
    max_seq_length = 64
    truncated = 0
    fingerprint = "hash-encoder"
    path = Path("hash-encoder")

    def encode(self, texts, batch_size: int = 64, normalize: bool | None = None, progress: bool = False):
        items = [texts] if isinstance(texts, str) else list(texts)
        seeds = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) for t in items]
        vectors = np.stack([np.random.default_rng(s).standard_normal(self.dim) for s in seeds])
        if normalize:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors.astype(np.float32)
        return vectors[0] if isinstance(texts, str) else vectors
