"""The index folder: exact flat search, HNSW recall, IVF-PQ, append, atomicity, corrupt files."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force, clustered, write_jsonl

from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.index import (
    HNSW_M,
    INDEX_FILE,
    META_FILE,
    SearchIndex,
    choose_kind,
    index_params,
    new_faiss_index,
    open_index_for,
)
from embedkit.index.folder import index_files_dir
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_options import IndexOptions
from embedkit.jobs.streaming import CorpusOptions
from embedkit.storage.checksums import write_checksums

DIM = 32  # the tiny BERT's hidden size: TableEncoder claims to be that model


def corpus_and_encoder(tmp_path, tiny_bert, vectors, prefix="d", queries=None):
    ids = [f"{prefix}{i}" for i in range(len(vectors))]
    texts = [f"text of {doc_id}" for doc_id in ids]
    table = dict(zip(texts, vectors, strict=True))
    if queries is not None:
        table.update({f"query {j}": q for j, q in enumerate(queries)})
    corpus = write_jsonl(tmp_path / f"{prefix}.jsonl", ids, texts)
    return corpus, TableEncoder(tiny_bert, table), ids


def test_flat_search_equals_brute_force(tmp_path, tiny_bert):
    rng = np.random.default_rng(0)
    docs, queries = rng.standard_normal((300, DIM)), rng.standard_normal((20, DIM)) * 3.0
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    report = build_index(corpus, tmp_path / "idx", encoder, IndexOptions(corpus=CorpusOptions(chunk_size=64)))
    assert (report.kind, report.count) == ("flat", 300)
    with SearchIndex.load(tmp_path / "idx") as index:
        scores, found = index.search(queries, k=10)
    want_scores, want_rows = brute_force(docs, queries, 10)
    assert found == [[ids[r] for r in row] for row in want_rows]
    np.testing.assert_allclose(scores, want_scores, atol=1e-6)


def test_round_trip_search_text_and_documents(tmp_path, tiny_bert):
    data = clustered(205, DIM, clusters=8, seed=1)
    docs, queries = data[:200], data[200:]
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs, queries=queries)
    build_index(corpus, tmp_path / "idx", encoder, IndexOptions(kind="hnsw"))
    with SearchIndex.load(tmp_path / "idx") as first, SearchIndex.load(tmp_path / "idx") as second:
        assert first.kind == "hnsw" and len(first.rows) == 200
        hits = first.search_text([f"query {j}" for j in range(5)], k=5, encoder=encoder)
        scores, found = second.search(queries, k=5)
        assert [[h.id for h in row] for row in hits] == found
        np.testing.assert_allclose([[h.score for h in row] for row in hits], scores, atol=1e-6)
        assert all(h.document.text == f"text of {h.id}" for row in hits for h in row)
        docs_back = first.get_documents(["d3", "missing", "d0"])
        assert [d.text if d else None for d in docs_back] == ["text of d3", None, "text of d0"]
    _, want_rows = brute_force(docs, queries, 5)
    assert found == [[ids[r] for r in row] for row in want_rows]  # 200 points: HNSW is exact here
    meta = json.loads((index_files_dir(tmp_path / "idx") / META_FILE).read_text())
    assert meta["params"]["M"] == HNSW_M
    assert meta["metric"] == "inner_product" and meta["dim"] == DIM and meta["count"] == 200


def test_append_keeps_old_results_and_adds_new_ones(tmp_path, tiny_bert):
    rng = np.random.default_rng(2)
    old_docs, new_docs = rng.standard_normal((50, DIM)), rng.standard_normal((30, DIM))
    queries = rng.standard_normal((10, DIM))
    corpus_a, enc_a, ids_a = corpus_and_encoder(tmp_path, tiny_bert, old_docs, prefix="a")
    corpus_b, enc_b, ids_b = corpus_and_encoder(tmp_path, tiny_bert, new_docs, prefix="b")
    build_index(corpus_a, tmp_path / "idx", enc_a)
    with SearchIndex.load(tmp_path / "idx") as index:
        before = index.search(old_docs, k=1)
    report = build_index(corpus_b, tmp_path / "idx", enc_b, IndexOptions(append=True))
    assert (report.appended, report.added, report.count) == (True, 30, 80)
    with SearchIndex.load(tmp_path / "idx") as index:
        after_self = index.search(old_docs, k=1)
        scores, found = index.search(queries, k=7)
    assert after_self[1] == before[1] == [[i] for i in ids_a]  # each old document still finds itself
    want_scores, want_rows = brute_force(np.vstack([old_docs, new_docs]), queries, 7)
    assert found == [[(ids_a + ids_b)[r] for r in row] for row in want_rows]
    np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    meta = json.loads((index_files_dir(tmp_path / "idx") / META_FILE).read_text())
    assert [s["added"] for s in meta["sources"]] == [50, 30]


def test_a_duplicate_id_on_append_changes_nothing(tmp_path, tiny_bert):
    docs = np.random.default_rng(3).standard_normal((20, DIM))
    corpus, encoder, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    build_index(corpus, tmp_path / "idx", encoder)
    before = _tree(tmp_path / "idx")
    with pytest.raises(InputError, match="duplicate document id 'd0'"):
        build_index(corpus, tmp_path / "idx", encoder, IndexOptions(append=True))
    assert _tree(tmp_path / "idx") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "idx"]  # no temporary folder left


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_new_index_refuses_to_replace_silently(tmp_path, tiny_bert):
    docs = np.random.default_rng(4).standard_normal((5, DIM))
    corpus, encoder, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    build_index(corpus, tmp_path / "idx", encoder)
    with pytest.raises(InputError, match="already holds an index"):
        build_index(corpus, tmp_path / "idx", encoder)
    assert build_index(corpus, tmp_path / "idx", encoder, IndexOptions(overwrite=True)).count == 5
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="neither empty nor an index"):
        build_index(corpus, tmp_path / "other", encoder, IndexOptions(overwrite=True))
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep me"


def test_hnsw_defaults_have_sane_recall_on_clustered_data(tiny_bert):
    data = clustered(4200, 64, clusters=40, seed=5)
    docs, queries = data[:4000], data[4000:]  # held-out queries from the same clusters
    index = new_faiss_index("hnsw", 64, index_params("hnsw", len(docs), 64))
    index.add(docs)
    _, rows = index.search(queries, 10)
    _, exact = brute_force(docs, queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows.tolist(), exact.tolist(), strict=True)])
    assert recall >= 0.95


def test_ivf_pq_trains_on_a_sample_and_finds_neighbours(tmp_path, tiny_bert):
    n = 10_000
    docs = clustered(n, DIM, clusters=50, seed=7)
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    options = CorpusOptions(chunk_size=4096)
    report = build_index(corpus, tmp_path / "idx", encoder, IndexOptions(kind="ivf-pq", corpus=options))
    assert report.kind == "ivf-pq" and report.params["m"] == DIM // 8
    assert not (tmp_path / "idx" / "vectors.tmp.npy").exists()
    with SearchIndex.load(tmp_path / "idx") as index:
        _, found = index.search(docs[:100], k=10)
    _, exact = brute_force(docs, docs[:100], 10)
    exact_ids = [{ids[r] for r in row} for row in exact.tolist()]
    recall = np.mean([len(set(f) & e) / 10 for f, e in zip(found, exact_ids, strict=True)])
    print(f"ivf-pq recall@10 {recall:.3f}")
    assert recall >= 0.4  # 4 bytes a vector is coarse, but chance is 0.001
    assert sum(ids[i] in f for i, f in enumerate(found)) >= 80  # documents find themselves


def test_choose_kind():
    assert choose_kind("auto", 99_999, 384)[0] == "flat"
    assert choose_kind("auto", 100_000, 384, memory=64 * 2**30)[0] == "hnsw"
    assert choose_kind("auto", 10_000_000, 384, memory=8 * 2**30)[0] == "ivf-pq"
    assert choose_kind("auto", 500_000, 384, on_gpu=True)[0] == "ivf-pq"
    assert choose_kind("flat", 10**9, 384) == ("flat", "asked for")
    with pytest.raises(InputError, match="no GPU HNSW"):
        choose_kind("hnsw", 10, 384, on_gpu=True)
    with pytest.raises(InputError, match="unknown index kind 'ivf'"):
        choose_kind("ivf", 10, 384)
    with pytest.raises(InputError, match="ivf-pq needs at least 9,984 documents"):
        index_params("ivf-pq", 500, 384)


@pytest.fixture
def small_index(tmp_path, tiny_bert):
    docs = np.random.default_rng(8).standard_normal((40, DIM))
    corpus, encoder, _ = corpus_and_encoder(tmp_path, tiny_bert, docs)
    build_index(corpus, tmp_path / "idx", encoder)
    return tmp_path / "idx", encoder


def test_truncated_or_corrupt_index_file(small_index):
    path = index_files_dir(small_index[0])
    data = (path / INDEX_FILE).read_bytes()
    (path / INDEX_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated"):
        SearchIndex.load(path)
    (path / INDEX_FILE).write_bytes(b"\0" * len(data))
    with pytest.raises(InputError, match="corrupt"):
        SearchIndex.load(path)
    write_checksums(path)  # the damage recorded as written: faiss itself refuses the file
    with pytest.raises(InputError, match="corrupt index file"):
        SearchIndex.load(path)
    (path / INDEX_FILE).unlink()
    with pytest.raises(InputError, match="index.faiss is missing: the folder is incomplete"):
        SearchIndex.load(path)


def test_corrupt_store_and_metadata(small_index):
    root = small_index[0]
    path = index_files_dir(root)
    shutil.copy(path / "docs.sqlite", path / "docs.bak")
    (path / "docs.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match="docs.sqlite is truncated or altered"):
        SearchIndex.load(root)
    write_checksums(path)  # the damage recorded as written: SQLite itself refuses it
    with pytest.raises(InputError, match="corrupt document store"):
        SearchIndex.load(root)
    (path / META_FILE).write_text("{")
    write_checksums(path)
    with pytest.raises(InputError, match="cannot read"):
        SearchIndex.load(root)
    with pytest.raises(InputError, match="not an embedkit index"):
        SearchIndex.load(root.parent)


def test_encoder_of_another_model_is_refused(small_index, tmp_path_factory):
    from tiny_models import make_tiny_bert

    from embedkit.index import check_model_for, read_index_meta

    path, encoder = small_index
    other = make_tiny_bert(tmp_path_factory.mktemp("other"), seed=1)
    with pytest.raises(InputError, match="is not the model the index recorded"):
        check_model_for(read_index_meta(path), other)
    wide = make_tiny_bert(tmp_path_factory.mktemp("wide"), hidden_size=48)
    with pytest.raises(InputError, match="gives 48-d vectors; the index holds 32-d"):
        check_model_for(read_index_meta(path), wide)
    assert open_index_for(path, encoder).dim == DIM
    impostor = TableEncoder(other, encoder.table)
    with pytest.raises(InputError, match="is not the model the index"):
        open_index_for(path, impostor)


def test_search_arguments(small_index):
    path, _ = small_index
    with SearchIndex.load(path) as index:
        with pytest.raises(InputError, match="this index holds 32-d vectors"):
            index.search(np.ones((2, 16)), k=3)
        with pytest.raises(InputError, match="k must be at least 1"):
            index.search(np.ones(DIM), k=0)
        scores, found = index.search(np.ones(DIM), k=100)  # k is capped at the index's size
        assert scores.shape == (1, 40) and len(found[0]) == 40


def test_gpu_without_faiss_gpu_is_an_input_error(small_index):
    import faiss

    if faiss.get_num_gpus() > 0:
        pytest.skip("faiss sees a GPU here")
    path, _ = small_index
    with pytest.raises(InputError, match="faiss sees no GPU"):
        SearchIndex.load(path, runtime=Runtime("cuda"))


@pytest.mark.parametrize(
    "settings",
    [{}, {"passages": "4:1"}, {"append": True, "upsert": True}],
    ids=["new", "passages", "upsert"],
)
def test_index_reads_its_corpus_once(tmp_path, tiny_bert, monkeypatch, settings):
    """Count, fingerprint, passages, an upsert's ids and the embedding all come from one read."""
    import embedkit.data.corpus as corpus_module

    rng = np.random.default_rng(5)
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, rng.standard_normal((40, DIM)))
    if settings.get("append"):
        build_index(corpus, tmp_path / "idx", encoder)
    reads = []
    original = corpus_module.read_documents

    def counted(*args, **kwargs):
        reads.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(corpus_module, "read_documents", counted)
    report = build_index(corpus, tmp_path / "idx", encoder, IndexOptions(calibrate=False, **settings))
    assert reads == [corpus] and report.added == 40
    with SearchIndex.load(tmp_path / "idx") as index:
        assert index.document_count == 40 and index.get_documents(ids[:3])[0] is not None
