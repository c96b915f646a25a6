"""What the bound tests share (`test_input_bounds.py`, `test_filter_shapes.py`): the documents, a
flat index with a lexical side and an index of passages over them, and the one-line check."""

from __future__ import annotations

import json
from pathlib import Path

from embedkit import build_index
from embedkit.jobs.index_options import IndexOptions

N = 24  # documents of the test indexes
LANGS = ["en", "fr", "de"]


def documents() -> list[dict]:
    """Each document's metadata: v (its number), lang, and year on three documents of four."""
    docs = []
    for i in range(N):
        doc = {"v": i, "lang": LANGS[i % 3]}
        if i % 4:
            doc["year"] = 2000 + i
        docs.append(doc)
    return docs


def build_bound_indexes(folder: Path, model: Path) -> dict[str, Path]:
    """Document `d{i}` ("wing flow lift number i") holds `documents()[i]`: indexed whole (flat,
    with a lexical side) and as passages."""
    corpus = folder / "c.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i, meta in enumerate(documents()):
            f.write(json.dumps({"_id": f"d{i}", "text": f"wing flow lift number {i}", **meta}) + "\n")
    whole = build_index(corpus, folder / "whole", model, IndexOptions(kind="flat", device="cpu")).path
    parts = build_index(corpus, folder / "parts", model, IndexOptions(device="cpu", passages="2:1")).path
    return {"whole": whole, "passages": parts, "corpus": corpus}


def one_error_line(result) -> str:
    """The one `error:` line of a CLI run that exits 2, short (a long number shown by its ends)."""
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[:5]
    assert len(lines[0]) < 1_000, lines[0][:200]
    return lines[0]
