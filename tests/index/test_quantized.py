"""`index --quantize int8|binary`: codes searched first, the candidates rescored with float vectors.

Reference: exact float search by brute force (numpy) over the model's vectors computed here by
hand, among the rows a filter allows and a deletion leaves; the float vectors kept on disk
against those same vectors.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from fixture_text import AERO_WORDS

from embedkit import SearchIndex, build_index
from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError
from embedkit.index.edits import compact_index, delete_documents
from embedkit.index.folder import index_files_dir
from embedkit.index.integrity import verify_index
from embedkit.index.quantized import FULL_VECTORS
from embedkit.jobs.index_options import IndexOptions

CASES = [("flat", "int8"), ("hnsw", "int8"), ("flat", "binary"), ("hnsw", "binary")]
QUERIES = ["shock wave on the wing", "heat transfer at high mach", "drag and lift", "boundary layer flow"]


def _records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"_id": f"d{i}", "text": " ".join(rng.choices(AERO_WORDS, k=6)), "year": 1950 + i % 7}
        for i in range(n)
    ]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _exact(encoder, records, queries, k, keep=None):
    """Exact cosine top-k by brute force: [(id, score)] per query, among `keep` (ids) if given."""
    kept = [r for r in records if keep is None or r["_id"] in keep]
    docs = encoder.encode([r["text"] for r in kept], normalize=True).astype(np.float64)
    q = encoder.encode(queries, normalize=True).astype(np.float64)
    scores = q @ docs.T
    return [
        [(kept[j]["_id"], scores[i, j]) for j in np.argsort(-scores[i], kind="stable")[:k]]
        for i in range(len(q))
    ]


def _check(hits, expected):
    for got, want in zip(hits, expected, strict=True):
        np.testing.assert_allclose([h.score for h in got], [s for _, s in want], atol=1e-5)
        assert {h.id for h in got} == {i for i, _ in want} or len({round(s, 5) for _, s in want}) < len(want)


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    return load_encoder(tiny_bert, device="cpu")


@pytest.mark.parametrize(("kind", "quantize"), CASES)
def test_rescored_search_is_exact_float_search(tmp_path, tiny_bert, encoder, kind, quantize):
    records = _records(60)
    out = tmp_path / "idx"
    options = IndexOptions(kind=kind, quantize=quantize, lexical=False, calibrate=False)
    build_index(_write(tmp_path / "c.jsonl", records), out, tiny_bert, options)
    folder = index_files_dir(out)
    full = np.load(folder / FULL_VECTORS)
    np.testing.assert_allclose(full, encoder.encode([r["text"] for r in records], normalize=True), atol=1e-5)
    float_bytes = 60 * encoder.dim * 4
    assert (folder / "index.faiss").stat().st_size < float_bytes + (60 * 32 * 8 if kind == "hnsw" else 4096)
    with SearchIndex.load(out) as index:
        assert index.meta["params"]["quantize"] == quantize
        k = 60 // index.meta["params"]["rescore"]  # every row a candidate: exactly the float search
        _check(index.search_text(QUERIES, k=k, mode="dense"), _exact(encoder, records, QUERIES, k))
        # fewer candidates than rows: the scores are still the exact cosines of the rows returned
        queries = encoder.encode(QUERIES, normalize=True)
        assert index.meta["params"]["rescore"] < 60  # k=1: fewer candidates than the 60 rows
        for q, hits in enumerate(index.search_text(QUERIES, k=1, mode="dense")):
            rows = [int(h.id[1:]) for h in hits]
            assert len(rows) == 1
            np.testing.assert_allclose([h.score for h in hits], full[rows] @ queries[q], atol=1e-5)
        np.testing.assert_allclose(index.rows.vectors([3, 7]), full[[3, 7]])
    assert verify_index(out).files >= 4


@pytest.mark.parametrize(("kind", "quantize"), CASES)
def test_filters_deletions_append_and_compact(tmp_path, tiny_bert, encoder, kind, quantize):
    records = _records(48)
    out = tmp_path / "idx"
    build_index(
        _write(tmp_path / "c.jsonl", records),
        out,
        tiny_bert,
        IndexOptions(kind=kind, quantize=quantize, calibrate=False),
    )
    k = 4
    allowed = {r["_id"] for r in records if r["year"] >= 1954}
    with SearchIndex.load(out) as index:
        hits = index.search_text(QUERIES, k=k, mode="dense", where="year >= 1954")
        assert all(h.id in allowed for r in hits for h in r)
        _check(hits, _exact(encoder, records, QUERIES, k, allowed))
    gone = {f"d{i}" for i in range(0, 48, 3)}
    delete_documents(out, sorted(gone))
    live = {r["_id"] for r in records} - gone
    more = _records(12, seed=1)
    for i, r in enumerate(more):
        r["_id"] = f"n{i}"
    build_index(_write(tmp_path / "more.jsonl", more), out, None, IndexOptions(append=True, calibrate=False))
    everything, live = records + more, live | {r["_id"] for r in more}
    assert np.load(index_files_dir(out) / FULL_VECTORS).shape == (60, encoder.dim)
    for step in ("deleted and appended", "compacted"):
        with SearchIndex.load(out) as index:
            wide = len(live) // index.meta["params"]["rescore"]
            hits = index.search_text(QUERIES, k=wide, mode="dense")
            assert all(h.id in live for r in hits for h in r), step
            _check(hits, _exact(encoder, everything, QUERIES, wide, live))
        verify_index(out)
        compact_index(out)


def test_quantize_refusals(tmp_path, tiny_bert):
    corpus = _write(tmp_path / "c.jsonl", _records(10))
    with pytest.raises(InputError, match="unknown --quantize"):
        build_index(
            corpus, tmp_path / "a", tiny_bert, IndexOptions(quantize="int4", lexical=False, calibrate=False)
        )
    with pytest.raises(InputError, match="flat or hnsw"):
        build_index(corpus, tmp_path / "b", tiny_bert, IndexOptions(kind="ivf-pq", quantize="int8"))
    out = tmp_path / "c"
    build_index(corpus, out, tiny_bert, IndexOptions(quantize="binary", lexical=False, calibrate=False))
    with pytest.raises(InputError, match="differs from the index's"):
        build_index(corpus, out, None, IndexOptions(append=True, quantize="int8"))
    (index_files_dir(out) / FULL_VECTORS).unlink()
    with pytest.raises(InputError):
        SearchIndex.load(out)
    with pytest.raises(InputError):
        verify_index(out)


@pytest.mark.parametrize(
    ("k", "rescore", "rows", "wanted"),
    [
        (10, 40, 1_000_000, 400),  # rescore x k
        (100, 40, 1_000_000, 1000),  # hybrid's 100 a side: capped at RESCORE_MAX
        (2000, 4, 1_000_000, 2000),  # never fewer than the hits asked for
        (10, 40, 60, 60),  # never more than the index holds
    ],
)
def test_rescore_candidates_by_hand(k, rescore, rows, wanted):
    from embedkit.index.quantized import RESCORE_MAX, rescore_candidates

    assert RESCORE_MAX == 1000
    assert rescore_candidates(k, rescore, rows) == wanted
