"""Shared by the calibration tests: documents that give every kind of pseudo query, a bag-of-words
encoder, and nDCG@10 computed by hand from a search's hits."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np

from embedkit.encode.identity import model_fingerprint

WORDS = (
    "shock",
    "wave",
    "wing",
    "lift",
    "drag",
    "boundary",
    "layer",
    "heat",
    "transfer",
    "stall",
    "jet",
    "noise",
    "buckling",
    "shell",
    "plate",
    "flutter",
    "vortex",
    "nozzle",
    "pressure",
    "gradient",
    "laminar",
    "turbulent",
    "supersonic",
    "subsonic",
    "cone",
    "cylinder",
    "panel",
    "skin",
    "friction",
    "separation",
    "reattachment",
    "spike",
    "inlet",
    "diffuser",
    "blade",
    "rotor",
    "cascade",
)


class WordHashEncoder:
    """A bag-of-words encoder: each word a fixed random vector, a text the sum of its words'.

    Dense and BM25 then agree in part, as a real model and BM25 do; it claims `model_dir`'s identity.
    """

    backend, device, max_seq_length, truncated, dim = "hash", "cpu", 64, 0, 24

    def __init__(self, model_dir: Path) -> None:
        self.path = model_dir
        self.fingerprint = model_fingerprint(model_dir)

    def encode(self, texts, batch_size: int = 64, normalize: bool | None = None, progress: bool = False):
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
                out[i] += np.random.default_rng(seed).standard_normal(self.dim)
            out[i] += 1e-3  # an empty text is not a zero vector
        if normalize:
            out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32)


def calibration_documents(n: int = 40, seed: int = 3) -> list[dict[str, str]]:
    """Titled documents of three sentences about a few of WORDS each (ict, title and terms queries)."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        topic = list(rng.choice(WORDS, 4, replace=False))
        sentences = [
            " ".join([*rng.choice(topic, 3), *rng.choice(WORDS, 3), "measured", f"case{i}"]).capitalize()
            + "."
            for _ in range(3)
        ]
        docs.append({"_id": f"d{i}", "title": " ".join(topic[:2]), "text": " ".join(sentences)})
    return docs


def write_jsonl_docs(path: Path, docs: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


def trec_order(hits) -> list[str]:
    """Ids by score, ties by id descending: how trec_eval (and `eval retrieval`) ranks a run.

    Rank fusion ties often (two ranks summing alike); the metric, not the search, breaks them.
    """
    by_id = sorted(hits, key=lambda h: h.id, reverse=True)
    return [h.id for h in sorted(by_id, key=lambda h: -h.score)]  # sorted() is stable


def ndcg_at_10(ranked_ids: list[str], relevant: str) -> float:
    """One relevant document: 1 / log2(rank + 1) if it is in the top 10, else 0."""
    top = ranked_ids[:10]
    return 1.0 / math.log2(top.index(relevant) + 2) if relevant in top else 0.0
