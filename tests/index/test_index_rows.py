"""An index's vector rows (`index.rows`, `embedkit.index.vector_rows`): their count, vectors and
documents, checked against the vectors and documents written, and numpy's exact search over them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force, write_jsonl

from embedkit import IndexOptions, SearchIndex, build_index

DIM = 32  # the tiny BERT's hidden size: TableEncoder claims to be that model
N = 60


@pytest.fixture(scope="module")
def flat_index(tmp_path_factory, tiny_bert):
    """A flat index of N random vectors (no ties) under the ids d0..d59, and what was written."""
    folder = tmp_path_factory.mktemp("rows")
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((N, DIM)).astype(np.float32)
    ids = [f"d{i}" for i in range(N)]
    texts = [f"text of {doc_id}" for doc_id in ids]
    encoder = TableEncoder(tiny_bert, dict(zip(texts, vectors, strict=True)))
    corpus = write_jsonl(folder / "c.jsonl", ids, texts)
    build_index(corpus, folder / "idx", encoder, IndexOptions(kind="flat"))
    return folder / "idx", encoder, vectors, ids, texts


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_rows_give_back_the_vectors_and_documents_written(flat_index) -> None:
    out, _, vectors, ids, texts = flat_index
    rows = [5, 0, 59, 17]
    with SearchIndex.load(out) as index:
        assert len(index.rows) == index.document_count == N
        np.testing.assert_allclose(index.rows.vectors(rows), _unit(vectors[rows]), atol=1e-6)
        found = index.rows.documents([*rows, 10**6])  # a row past the end holds nothing
    assert [(d.id, d.text) for d in found[:-1]] == [(ids[r], texts[r]) for r in rows]
    assert found[-1] is None


def test_numpy_over_the_rows_ranks_as_the_index_searches(flat_index) -> None:
    """The two faces agree: exact search in numpy over the rows' vectors, mapped to ids through
    the rows' documents, gives `SearchIndex.search`'s ids and scores."""
    out, _, _, _, _ = flat_index
    queries = np.random.default_rng(8).standard_normal((6, DIM)).astype(np.float32)
    with SearchIndex.load(out) as index:
        every = list(range(len(index.rows)))
        stored, documents = index.rows.vectors(every), index.rows.documents(every)
        scores, found = index.search(queries, k=7)
    want_scores, want_rows = brute_force(stored, queries, 7)
    assert found == [[documents[r].id for r in row] for row in want_rows]
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_rows_a_store_cannot_read_back_are_embedded_again(flat_index, monkeypatch) -> None:
    """A store without its vectors (a GPU index, an IVF index without its map): each row's text is
    embedded with the encoder given, checked to be the index's model."""
    out, encoder, vectors, _, _ = flat_index
    with SearchIndex.load(out) as index:
        monkeypatch.setattr(index.store, "vectors_of_rows", lambda rows: None)
        np.testing.assert_allclose(index.rows.vectors([3, 1], encoder), _unit(vectors[[3, 1]]), atol=1e-6)


def test_the_rows_of_an_index_of_passages_give_their_whole_documents(tmp_path, tiny_bert) -> None:
    words = ["shock", "wave", "boundary", "layer", "flutter", "panel", "heat", "transfer", "flow", "wing"]
    records = [{"_id": f"p{i}", "text": " ".join((words[i:] + words[:i]) * 3)} for i in range(5)]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(passages="8:2", device="cpu"))
    with SearchIndex.load(tmp_path / "idx") as index:
        count = len(index.rows)
        documents = index.rows.documents(range(count))
    assert count > len(records) == index.document_count  # several passages a document
    held = [(d.id, d.text) for d in documents]
    written = [(r["_id"], r["text"]) for r in records]
    # rows are numbered in the corpus's order, each document's passages one after another
    assert list(dict.fromkeys(held)) == written and held == sorted(held, key=written.index)


def test_the_earlier_names_warn_and_answer_as_the_rows_do(flat_index) -> None:
    out, _, _, _, _ = flat_index
    with SearchIndex.load(out) as index:
        with pytest.warns(DeprecationWarning, match="len\\(index.rows\\)"):
            assert len(index) == len(index.rows)
        with pytest.warns(DeprecationWarning, match="index.rows.vectors"):
            np.testing.assert_array_equal(index.vectors_of_rows([2, 4]), index.rows.vectors([2, 4]))
        with pytest.warns(DeprecationWarning, match="index.rows.documents"):
            assert index.documents_at([2, 4]) == index.rows.documents([2, 4])
        with pytest.warns(DeprecationWarning, match="embedkit.search.request.default_mode"):
            assert index.default_mode() == index.request().mode
        with pytest.warns(DeprecationWarning, match="embedkit.search.request.fusion_for"):
            assert index.default_fusion() == (index.request().fusion, index.request().alpha)
