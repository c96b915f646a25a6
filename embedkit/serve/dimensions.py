"""The `dimensions` of OpenAI's embeddings route and TEI's `/embed`: fewer dimensions than the model's.

Any size from 1 to the model's dimension is served, its vectors cut to their first N dimensions
(`embedkit.encode.dimensions`), as OpenAI's API serves any `dimensions` of its Matryoshka models and
sentence-transformers' `truncate_dim` cuts any model. A model trained with `embedkit train
--matryoshka` keeps its quality best at the sizes its embedkit.json records (`matryoshka_dims`); other
sizes and other models lose more (docs/dimensions.md has measured figures). A size above the
model's is refused: nothing can add dimensions.

The vectors' other form on that route is `encoding_format: "base64"` (`base64_rows`).
"""

from __future__ import annotations

import base64

import numpy as np


def dimensions_problem(model_dim: int, asked: int | None) -> str | None:
    """Why `asked` dimensions cannot be served by a `model_dim`-d model, or None where they can."""
    if asked is None or 1 <= asked <= model_dim:
        return None
    return f"dimensions {asked}: this model gives {model_dim}-d vectors; ask for 1 to {model_dim}"


def cut(asked: int | None, model_dim: int) -> int | None:
    """The size to cut the vectors to, or None where they stay as the model gives them."""
    return asked if asked is not None and asked < model_dim else None


def base64_rows(vectors: np.ndarray) -> list[str]:
    """OpenAI's base64 encoding of each row: its little-endian float32 bytes, base64, straight from
    the array's memory (no float goes through Python). Where a row's bytes are a multiple of 3
    (384 dimensions: 1,536 bytes), one encoding of the whole matrix is cut into rows."""
    little = np.ascontiguousarray(vectors, dtype="<f4")
    row_bytes = little.shape[1] * 4 if little.ndim == 2 else 0
    if row_bytes and row_bytes % 3 == 0:
        whole = base64.b64encode(little.tobytes()).decode("ascii")
        step = row_bytes // 3 * 4
        return [whole[start : start + step] for start in range(0, len(whole), step)]
    return [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
