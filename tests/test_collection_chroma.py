"""The collection API against Chroma itself: the same calls, in Chroma's shapes, on a `chromadb`
in-memory collection (cosine space) and on an embedkit collection searched in dense mode, both
embedding with the same tiny model; ids, distances, documents and metadatas must agree.

chromadb is a test-only dependency (the `test` extra); without it these tests skip.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import embedkit

chromadb = pytest.importorskip("chromadb", reason="chromadb (the test extra) is not installed")

WORDS = "shock wave wing boundary layer heat flow pressure drag lift nozzle jet mach".split()  # noqa: SIM905
QUERIES = ["shock wave on a wing", "heat flow in a nozzle", "lift and drag"]


def records(count: int = 24) -> tuple[list[str], list[str], list[dict | None]]:
    """ids, texts and metadatas: a year, a language, list-valued tags, and one record without any."""
    ids, texts, metas = [], [], []
    for n in range(count):
        ids.append(f"d{n}")
        texts.append(" ".join(WORDS[(n * 7 + j * 3) % len(WORDS)] for j in range(5 + n % 4)) + f" {n}")
        tags = [WORDS[n % 5], WORDS[(n + 2) % 5]] if n % 3 else [WORDS[n % 5]]
        metas.append(None if n == 7 else {"year": 2000 + n, "lang": "en" if n % 2 else "de", "tags": tags})
    return ids, texts, metas


class TinyModel(chromadb.EmbeddingFunction):
    """Chroma's embedding function over the same encoder the embedkit collection embeds with."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder

    def __call__(self, input):  # noqa: A002 (Chroma's parameter name)
        return list(self.encoder.encode(list(input), normalize=True))

    @staticmethod
    def name() -> str:
        return "embedkit-tiny"

    def get_config(self) -> dict:
        return {}

    @staticmethod
    def build_from_config(config):  # pragma: no cover - Chroma calls it for persisted collections only
        raise NotImplementedError


@pytest.fixture()
def pair(tiny_onnx: Path, tmp_path: Path):
    """A Chroma collection and an embedkit one, each given the same `add`."""
    encoder = embedkit.load_encoder(tiny_onnx, device="cpu")
    client = chromadb.EphemeralClient()
    theirs = client.create_collection(
        f"c{tmp_path.name[-40:]}".replace("_", "-").strip("-") + "x",
        embedding_function=TinyModel(encoder),
        metadata={"hnsw:space": "cosine"},
    )
    mine = embedkit.create_collection(tmp_path / "idx", encoder, device="cpu", calibrate=False)
    ids, texts, metas = records()
    for collection in (theirs, mine):
        collection.add(ids, metadatas=metas, documents=texts)  # Chroma's positional order
    yield theirs, mine
    client.delete_collection(theirs.name)


def same_query(theirs: dict, mine: dict) -> None:
    assert mine["ids"] == theirs["ids"]
    assert set(mine["included"]) == set(theirs["included"])
    for key in ("documents", "metadatas"):
        assert mine[key] == theirs[key]
    if theirs["embeddings"] is None:
        assert mine["embeddings"] is None
    else:
        for got, expected in zip(mine["embeddings"], theirs["embeddings"], strict=True):
            np.testing.assert_allclose(got, expected, atol=1e-5)
    if theirs["distances"] is None:
        assert mine["distances"] is None
        return
    for got, expected in zip(mine["distances"], theirs["distances"], strict=True):
        assert got == pytest.approx(expected, abs=1e-5)


def same_records(theirs: dict, mine: dict) -> None:
    """A `get`'s records, whatever their order (Chroma's by ids is its storage order)."""
    assert sorted(mine["ids"]) == sorted(theirs["ids"])
    for key in ("documents", "metadatas"):
        if theirs[key] is None:
            assert mine[key] is None
            continue
        expected = dict(zip(theirs["ids"], theirs[key], strict=True))
        assert dict(zip(mine["ids"], mine[key], strict=True)) == expected
    if theirs.get("embeddings") is None:
        assert mine.get("embeddings") is None
        return
    expected_vectors = dict(zip(theirs["ids"], theirs["embeddings"], strict=True))
    for doc_id, vector in zip(mine["ids"], mine["embeddings"], strict=True):
        np.testing.assert_allclose(vector, expected_vectors[doc_id], atol=1e-5)


@pytest.mark.parametrize(
    "call",
    [
        {"query_texts": QUERIES, "n_results": 5},
        {"query_texts": QUERIES[0], "n_results": 1},
        {"query_texts": QUERIES, "n_results": 100},  # more than held: every document
        {"query_texts": QUERIES[:2], "n_results": 4, "where": {"year": {"$gte": 2010}}},
        {"query_texts": QUERIES, "n_results": 3, "where": {"$or": [{"lang": "de"}, {"year": {"$lt": 2004}}]}},
        {
            "query_texts": QUERIES,
            "n_results": 6,
            "where": {"lang": {"$in": ["en"]}},
            "include": ["distances"],
        },
        {"query_texts": QUERIES, "n_results": 2, "include": ["documents"]},
        {"query_texts": QUERIES, "n_results": 3, "include": []},
        {"query_texts": QUERIES, "n_results": 3, "include": ["embeddings", "distances"]},
    ],
)
def test_query_answers_as_chroma_does(pair, call: dict) -> None:
    theirs, mine = pair
    same_query(theirs.query(**call), mine.query(**call))


def test_query_by_embeddings_answers_as_chroma_does(pair, tiny_onnx: Path) -> None:
    theirs, mine = pair
    vectors = embedkit.load_encoder(tiny_onnx, device="cpu").encode(QUERIES, normalize=True)
    for given in (vectors, [list(map(float, v)) for v in vectors]):
        same_query(
            theirs.query(query_embeddings=given, n_results=4), mine.query(query_embeddings=given, n_results=4)
        )
        same_query(
            theirs.query(given, n_results=2), mine.query(given, n_results=2)
        )  # positional, as Chroma's
    same_query(theirs.query(vectors[0], n_results=3), mine.query(vectors[0], n_results=3))  # one vector


@pytest.mark.parametrize(
    "call",
    [
        {},
        {"ids": ["d3", "d0", "d19", "nowhere"]},
        {"ids": "d4"},
        {"where": {"year": {"$gt": 2015}}, "include": ["metadatas"]},
        {"where": {"$and": [{"lang": "en"}, {"year": {"$lte": 2011}}]}, "include": ["documents"]},
        {"ids": ["d1", "d2", "d3"], "where": {"lang": "de"}},
        {"where": {"lang": {"$in": ["de"]}}, "include": []},
        {"ids": ["d5", "d1"], "include": ["embeddings", "documents"]},
    ],
)
def test_get_answers_as_chroma_does(pair, call: dict) -> None:
    theirs, mine = pair
    same_records(theirs.get(**call), mine.get(**call))


def test_peek_limit_offset_and_count_answer_as_chroma_does(pair) -> None:
    theirs, mine = pair
    assert mine.count() == theirs.count() == 24
    peeked = mine.peek(3)
    assert peeked["ids"] == theirs.peek(3)["ids"] == ["d0", "d1", "d2"]
    assert peeked["documents"] == theirs.peek(3)["documents"]
    np.testing.assert_allclose(peeked["embeddings"], theirs.peek(3)["embeddings"], atol=1e-5)
    assert mine.get(limit=4, offset=10)["ids"] == theirs.get(limit=4, offset=10)["ids"]


def test_writes_leave_what_chroma_leaves(pair) -> None:
    theirs, mine = pair
    calls = [
        ("delete", {"ids": ["d2", "d9"]}),
        ("delete", {"where": {"year": {"$gte": 2020}}}),
        ("update", {"ids": ["d4"], "metadatas": [{"year": 1999, "lang": None, "new": True}]}),
        ("update", {"ids": ["d5"], "documents": ["mach number of a jet nozzle"]}),
        (
            "upsert",
            {
                "ids": ["d6", "e1"],
                "documents": ["drag of a wing", "heat of a jet"],
                "metadatas": [{"a": 1}, None],
            },
        ),
    ]
    for method, call in calls:
        getattr(theirs, method)(**call)
        getattr(mine, method)(**call)
        same_records(theirs.get(), mine.get())
    assert mine.count() == theirs.count()
    for query in QUERIES:
        same_query(
            theirs.query(query_texts=[query], n_results=6), mine.query(query_texts=[query], n_results=6)
        )


def test_list_metadata_is_filtered_by_membership_as_chroma_does(pair) -> None:
    theirs, mine = pair
    for where in (
        {"tags": {"$contains": "wave"}},
        {"$or": [{"tags": {"$contains": "heat"}}, {"lang": "en"}]},
        {"$and": [{"tags": {"$contains": "shock"}}, {"year": {"$gt": 2005}}]},
    ):
        same_records(theirs.get(where=where), mine.get(where=where))
        call = {"query_texts": QUERIES, "n_results": 4, "where": where}
        same_query(theirs.query(**call), mine.query(**call))


@pytest.mark.parametrize(
    "where",
    [{"lang": {"$ne": "en"}}, {"year": {"$nin": [2001, 2002]}}, {"tags": {"$not_contains": "wave"}}],
)
def test_a_negation_keeps_documents_without_the_field_as_chroma_does(pair, where) -> None:
    theirs, mine = pair
    expected = theirs.get(where=where)
    assert "d7" in expected["ids"]  # the document without metadata
    same_records(expected, mine.get(where=where))
    call = {"query_texts": QUERIES, "n_results": 5, "where": where}
    same_query(theirs.query(**call), mine.query(**call))


def test_chroma_shapes_carry_embedkits_other_modes(pair) -> None:
    """mode="hybrid" or "lexical" in Chroma's call: that search's order (embedkit's own hits are
    the reference), each distance None as no distance ranks them; a delete by a filter matching
    nothing deletes nothing."""
    _, mine = pair
    for mode in ("hybrid", "lexical"):
        shaped = mine.query(query_texts=QUERIES, n_results=4, mode=mode)
        hits = mine.query(QUERIES, k=4, mode=mode, include=[])
        assert shaped["ids"] == [[h["id"] for h in per_query] for per_query in hits]
        assert shaped["distances"] == [[None] * len(ids) for ids in shaped["ids"]]
    assert mine.delete(where={"year": {"$gt": 3000}}) is None and mine.count() == 24
    assert mine.delete(where='year > 2020 and lang = "en"').documents == 2  # d21, d23
    assert mine.count() == 22


def test_what_chroma_does_and_embedkit_does_not_is_refused_by_name(pair) -> None:
    _, mine = pair
    refused = [
        ("query", {"query_texts": ["x"], "where_document": {"$contains": "wing"}}, "where_document"),
        ("query", {"query_texts": ["x"], "include": ["uris"]}, "'uris' is not supported"),
        ("query", {"query_texts": ["x"], "query_images": [np.zeros(3)]}, "no argument 'query_images'"),
        ("query", {"query_texts": ["x"], "ids": ["d1"]}, "no argument 'ids'"),
        ("get", {"include": ["distances"]}, "unknown name 'distances'"),
        ("get", {"include": ["data"]}, "'data' is not supported"),
        ("get", {"where_document": {"$regex": "w.*"}}, "where_document"),
        ("add", {"ids": ["z"], "embeddings": [[0.1, 0.2]], "documents": ["z"]}, "embeddings are not taken"),
        ("add", {"ids": ["z"], "documents": ["z"], "uris": ["a"]}, "no argument 'uris'"),
        ("delete", {"ids": ["d1"], "limit": 1}, "no argument 'limit'"),
    ]
    for method, call, message in refused:
        with pytest.raises(embedkit.InputError, match=message):
            getattr(mine, method)(**call)
    assert mine.count() == 24


def test_an_index_of_passages_answers_in_chroma_shapes(tiny_onnx: Path, tmp_path: Path) -> None:
    """Documents split into passages: each document once, in the order added; its vectors (one per
    passage) are not a document's embedding, so asking for them is refused."""
    ids, texts, metas = records(12)
    long_texts = [" ".join([t] * 12) for t in texts]  # several passages of 16 tokens each
    notes = embedkit.create_collection(
        tmp_path / "p", tiny_onnx, device="cpu", calibrate=False, passages="16:4"
    )
    notes.add(ids, metadatas=metas, documents=long_texts)
    assert notes.get(limit=3, offset=2)["ids"] == ["d2", "d3", "d4"]
    assert notes.get(where={"year": {"$gte": 2009}}, include=[])["ids"] == ["d9", "d10", "d11"]
    assert notes.peek(2)["documents"] == long_texts[:2] and notes.peek(2)["embeddings"] is None
    found = notes.query(query_texts=QUERIES, n_results=5)
    assert all(len(set(per_query)) == len(per_query) == 5 for per_query in found["ids"])
    with pytest.raises(embedkit.InputError, match="no vector per document"):
        notes.get(include=["embeddings"])
