"""`index --dim N`: an index of the first N dimensions of the model's vectors, renormalized.

References: the model run by hand, each vector cut to its first N entries and divided by the
prefix's norm (numpy, here), and exact cosine search over those by brute force.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError
from embedkit.index.folder import index_files_dir
from embedkit.jobs.index_options import IndexOptions

DOCS = [
    "shock wave on the wing",
    "heat transfer at high mach number",
    "the cat eats food",
    "boundary layer separation on a flat plate",
    "laminar flow over a cylinder",
]
QUERIES = ["shock wave", "heat transfer", "cat food"]
N = 8


def by_hand(vectors: np.ndarray, n: int) -> np.ndarray:
    prefix = np.asarray(vectors, dtype=np.float64)[:, :n]
    return prefix / np.linalg.norm(prefix, axis=1, keepdims=True)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    return path


def test_index_keeps_the_first_n_dimensions_renormalized(tmp_path, tiny_bert, corpus):
    out = tmp_path / "idx"
    build_index(corpus, out, tiny_bert, IndexOptions(kind="flat", dim=N, lexical=False, calibrate=False))
    encoder = load_encoder(tiny_bert, device="cpu")
    docs, queries = by_hand(encoder.encode(DOCS), N), by_hand(encoder.encode(QUERIES), N)
    meta = json.loads((index_files_dir(out) / "embedkit-index.json").read_text())
    assert (meta["dim"], meta["model_dim"]) == (N, encoder.dim)
    with SearchIndex.load(out) as index:
        assert index.dim == N
        stored = index.rows.vectors(range(len(DOCS)))
        np.testing.assert_allclose(stored, docs, atol=1e-5)
        hits = index.search_text(QUERIES, k=len(DOCS), mode="dense")
        exact = queries @ docs.T
        for q, ranking in enumerate(hits):
            scores = [h.score for h in ranking]
            np.testing.assert_allclose(scores, np.sort(exact[q])[::-1], atol=1e-5)
            assert ranking[0].id == str(int(np.argmax(exact[q])) + 1)
        # the model's full-size query vectors are another dimension: refused, not cut silently
        with pytest.raises(InputError, match=f"holds {N}-d"):
            index.search(encoder.encode(QUERIES), k=2)
        # an open encoder of the model is cut to the index's dimension for text queries
        again = index.search_text(QUERIES, k=2, mode="dense", encoder=encoder)
        assert [[h.id for h in r] for r in again] == [[h.id for h in r[:2]] for r in hits]


def test_append_keeps_the_dimension_and_refuses_another(tmp_path, tiny_bert, corpus):
    out = tmp_path / "idx"
    build_index(corpus, out, tiny_bert, IndexOptions(kind="flat", dim=N, lexical=False, calibrate=False))
    more = tmp_path / "more.txt"
    more.write_text("supersonic inlet design\n", encoding="utf-8")
    with pytest.raises(InputError, match="--dim 4 differs"):
        build_index(more, out, None, IndexOptions(append=True, dim=4, calibrate=False))
    build_index(more, out, None, IndexOptions(append=True, calibrate=False))
    expected = by_hand(load_encoder(tiny_bert, device="cpu").encode(["supersonic inlet design"]), N)
    with SearchIndex.load(out) as index:
        assert index.dim == N and len(index.rows) == len(DOCS) + 1
        np.testing.assert_allclose(index.rows.vectors([len(DOCS)]), expected, atol=1e-5)


def test_cli_dim_out_of_range_is_one_line_and_exit_2(tmp_path, tiny_bert, corpus):
    result = CliRunner().invoke(
        app, ["index", str(corpus), "--out", str(tmp_path / "idx"), "--model", str(tiny_bert), "--dim", "999"]
    )
    assert result.exit_code == 2, result.output
    assert "cannot keep 999 dimensions" in result.output and "Traceback" not in result.output
