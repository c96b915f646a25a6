"""`build_index_from_vectors`: an index from part files equals one built from the corpus in one pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder, brute_force, clustered, write_jsonl

from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.index import INDEX_FILE, META_FILE, SearchIndex
from embedkit.index.docstore import DocStore
from embedkit.index.folder import index_files_dir
from embedkit.index.lexical import LexicalSettings
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_from_parts import build_index_from_vectors
from embedkit.jobs.index_options import IndexOptions
from embedkit.jobs.parts import Shard
from embedkit.jobs.sharding import embed_shard
from embedkit.jobs.streaming import CorpusOptions

faiss = pytest.importorskip("faiss")

DIM = 32  # the tiny BERT's hidden size: TableEncoder claims to be that model


def corpus_and_encoder(folder: Path, model: Path, vectors: np.ndarray, prefix: str = "d"):
    ids = [f"{prefix}{i}" for i in range(len(vectors))]
    texts = [f"text of {doc_id}" for doc_id in ids]
    corpus = write_jsonl(folder / f"{prefix}.jsonl", ids, texts)
    return corpus, TableEncoder(model, dict(zip(texts, vectors, strict=True))), ids


def write_parts(corpus: Path, folder: Path, encoder, count: int, chunk_size: int = 1000) -> Path:
    options = CorpusOptions(chunk_size=chunk_size)
    for i in range(count):
        embed_shard(corpus, folder, Shard(i, count), encoder, options=options)
    return folder


def inverted_lists(index) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, codes) of every inverted list, read through faiss's own accessors."""
    ivf = faiss.extract_index_ivf(index)
    lists = ivf.invlists
    out = []
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        ids = faiss.rev_swig_ptr(lists.get_ids(number), size).copy() if size else np.zeros(0, np.int64)
        codes = (
            faiss.rev_swig_ptr(lists.get_codes(number), size * lists.code_size).copy()
            if size
            else np.zeros(0, np.uint8)
        )
        out.append((ids, codes))
    return out


def read_index(folder: Path):
    return faiss.read_index(str(index_files_dir(folder) / INDEX_FILE))


@pytest.fixture(scope="module")
def ivf_case(tmp_path_factory, tiny_bert):
    """10,000 clustered vectors (IVF-PQ's minimum is 9,984) as 3 parts, and both indexes built."""
    folder = tmp_path_factory.mktemp("ivf")
    docs = clustered(10_000, DIM, clusters=50, seed=11)
    corpus, encoder, ids = corpus_and_encoder(folder, tiny_bert, docs)
    parts = write_parts(corpus, folder / "parts", encoder, 3, chunk_size=4096)
    options = CorpusOptions(chunk_size=1500)  # adds in chunks that straddle no part boundary
    from_parts = build_index_from_vectors(
        parts, corpus, folder / "from-parts", kind="ivf-pq", options=options
    )
    one_pass = build_index(
        corpus,
        folder / "one-pass",
        encoder,
        IndexOptions(kind="ivf-pq", corpus=CorpusOptions(chunk_size=4096)),
    )
    return folder, docs, ids, from_parts, one_pass


def test_ivf_pq_from_parts_has_the_codes_of_one_pass_with_its_quantizer(ivf_case):
    folder, docs, ids, report, _ = ivf_case
    assert (report.kind, report.count, report.params["m"]) == ("ivf-pq", 10_000, DIM // 8)
    built = read_index(folder / "from-parts")
    # The reference: the same trained quantizers, emptied, then every vector added in one call.
    reference = faiss.clone_index(built)
    reference.reset()
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    reference.add(unit)
    got, want = inverted_lists(built), inverted_lists(reference)
    assert sum(len(i) for i, _ in got) == 10_000
    for (got_ids, got_codes), (want_ids, want_codes) in zip(got, want, strict=True):
        np.testing.assert_array_equal(got_ids, want_ids)
        np.testing.assert_array_equal(got_codes, want_codes)


def test_ivf_pq_from_parts_trains_as_a_single_pass_build_does(ivf_case):
    folder, *_ = ivf_case
    parts_index, one_pass = read_index(folder / "from-parts"), read_index(folder / "one-pass")
    ivf_a, ivf_b = faiss.extract_index_ivf(parts_index), faiss.extract_index_ivf(one_pass)
    np.testing.assert_array_equal(
        ivf_a.quantizer.reconstruct_n(0, ivf_a.nlist), ivf_b.quantizer.reconstruct_n(0, ivf_b.nlist)
    )
    np.testing.assert_array_equal(
        faiss.vector_to_array(parts_index.pq.centroids), faiss.vector_to_array(one_pass.pq.centroids)
    )
    for (ids_a, codes_a), (ids_b, codes_b) in zip(
        inverted_lists(parts_index), inverted_lists(one_pass), strict=True
    ):
        np.testing.assert_array_equal(ids_a, ids_b)
        np.testing.assert_array_equal(codes_a, codes_b)


def test_the_training_sample_is_gathered_across_parts_as_from_one_matrix(ivf_case):
    from embedkit.index.kinds import ivf_training_rows
    from embedkit.jobs.index_from_parts import _training_sample
    from embedkit.jobs.parts import read_parts

    folder, docs, *_ = ivf_case
    rows = ivf_training_rows(10_000, 100)  # 9,984 of 10,000 rows: a real sample, spanning all parts
    assert not isinstance(rows, slice) and len(rows) == 9_984
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    sample = _training_sample(read_parts(folder / "parts"), 10_000, rows, DIM)
    np.testing.assert_array_equal(sample, unit[rows])


def test_ivf_pq_from_parts_stores_documents_in_row_order_and_records_its_parts(ivf_case, tiny_bert):
    folder, docs, ids, _, _ = ivf_case
    files = index_files_dir(folder / "from-parts")
    store = DocStore.open(files / "docs.sqlite", lexical=LexicalSettings())
    try:
        assert store.ids_of_rows(range(10_000)) == dict(enumerate(ids))
        assert store.lexical is not None and store.lexical.next_row() == 10_000  # BM25 on by default
    finally:
        store.close()
    meta = json.loads((index_files_dir(folder / "from-parts") / META_FILE).read_text())
    one_pass = json.loads((index_files_dir(folder / "one-pass") / META_FILE).read_text())
    (source,) = meta["sources"]
    assert source["parts"] == [
        {"file": "part-0-of-3.npy", "vectors": 3333},
        {"file": "part-1-of-3.npy", "vectors": 3333},
        {"file": "part-2-of-3.npy", "vectors": 3334},
    ]
    assert (
        meta["model"] == str(tiny_bert.resolve())
        and meta["model_fingerprint"] == one_pass["model_fingerprint"]
    )
    assert meta["corpus_fingerprint"] == one_pass["corpus_fingerprint"]
    with SearchIndex.load(folder / "from-parts") as index:
        _, found = index.search(docs[:50], k=10)
    _, exact = brute_force(docs, docs[:50], 10)
    recall = np.mean([len(set(f) & {ids[r] for r in row}) / 10 for f, row in zip(found, exact, strict=True)])
    assert recall >= 0.4  # 4 bytes a vector is coarse, but chance is 0.001


def test_flat_from_parts_searches_as_one_pass(tmp_path, tiny_bert):
    rng = np.random.default_rng(3)
    docs, queries = rng.standard_normal((47, DIM)).astype(np.float32), rng.standard_normal((9, DIM))
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    parts = write_parts(corpus, tmp_path / "parts", encoder, 5, chunk_size=4)
    report = build_index_from_vectors(parts, corpus, tmp_path / "idx", options=CorpusOptions(chunk_size=3))
    assert (report.kind, report.count) == ("flat", 47)
    with SearchIndex.load(tmp_path / "idx") as index:
        scores, found = index.search(queries, k=6)
        texts = [d.text for d in index.get_documents(["d0", "d46"])]
    want_scores, want_rows = brute_force(docs, queries, 6)
    assert found == [[ids[r] for r in row] for row in want_rows]
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)
    assert texts == ["text of d0", "text of d46"]


@pytest.fixture
def small_parts(tmp_path, tiny_bert):
    docs = np.random.default_rng(4).standard_normal((23, DIM)).astype(np.float32)
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    return corpus, write_parts(corpus, tmp_path / "parts", encoder, 3), tmp_path


def test_a_missing_part_is_named(small_parts):
    corpus, parts, tmp_path = small_parts
    for suffix in (".npy", ".ids.txt", ".json"):
        (parts / f"part-1-of-3{suffix}").unlink()
    with pytest.raises(InputError, match=r"incomplete parts in .*: missing part-1-of-3$"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")
    (parts / "part-2-of-3.json").unlink()
    with pytest.raises(InputError, match="missing part-1-of-3, part-2-of-3.json"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", r"part part-1-of-3: part-1-of-3.npy is truncated or altered"),
        ("wide", r"part part-1-of-3: part-1-of-3.npy holds 33-d vectors; its sidecar says 32-d"),
        ("ids", r"part part-1-of-3: part-1-of-3.ids.txt holds 7 ids for 8 vectors"),
        ("nan", r"part part-1-of-3: part-1-of-3.npy holds NaN or infinite values"),
        ("sidecar", r"corrupt part sidecar .*part-1-of-3.json"),
        ("header", r"part part-1-of-3: part-1-of-3.npy is not a readable .npy"),
    ],
)
def test_a_corrupt_part_is_refused(small_parts, damage, message):
    corpus, parts, tmp_path = small_parts
    npy = parts / "part-1-of-3.npy"
    if damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:-10])
    elif damage == "wide":
        np.save(npy, np.zeros((8, DIM + 1), np.float32))
    elif damage == "ids":
        lines = (parts / "part-1-of-3.ids.txt").read_text().splitlines()
        (parts / "part-1-of-3.ids.txt").write_text("\n".join(lines[:-1]) + "\n")
    elif damage == "nan":
        vectors = np.load(npy)
        vectors[3, 5] = np.nan
        np.save(npy, vectors)
    elif damage == "sidecar":
        (parts / "part-1-of-3.json").write_text('{"format": 1, "shard": 1')
    else:
        npy.write_bytes(b"not an npy file at all")
    with pytest.raises(InputError, match=message):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")
    assert not (tmp_path / "idx" / "CURRENT").exists()  # nothing was published


def test_a_corpus_other_than_the_parts_is_refused(small_parts, tiny_bert):
    corpus, parts, tmp_path = small_parts
    lines = corpus.read_text().splitlines()
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"part part-0-of-3: row 0 has id 'd0', but document 1 .* is 'd1'"):
        build_index_from_vectors(parts, swapped, tmp_path / "idx")
    edited = tmp_path / "edited.jsonl"
    edited.write_text(
        "\n".join([*lines[:10], lines[10].replace("text of", "other text of"), *lines[11:]]) + "\n"
    )
    with pytest.raises(InputError, match="part part-1-of-3: the texts of its documents"):
        build_index_from_vectors(parts, edited, tmp_path / "idx")
    shorter = tmp_path / "short.jsonl"
    shorter.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(InputError, match="holds 22 documents; the parts were embedded from 23"):
        build_index_from_vectors(parts, shorter, tmp_path / "idx")


def test_the_model_must_be_the_parts_model(small_parts, tiny_bert, tmp_path_factory):
    from tiny_models import make_tiny_bert

    corpus, parts, tmp_path = small_parts
    other = make_tiny_bert(tmp_path_factory.mktemp("other"), seed=1)
    with pytest.raises(InputError, match="is not the model the parts recorded"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx", other)
    # The recorded folder moved (another machine): --model names it, and the index records that path.
    moved = tmp_path / "moved-model"
    shutil.copytree(tiny_bert, moved)
    for sidecar in parts.glob("*.json"):
        info = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**info, "model": str(tmp_path / "gone")}))
    with pytest.raises(InputError, match="cannot be opened here .*pass --model"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")
    build_index_from_vectors(parts, corpus, tmp_path / "idx", moved)
    assert json.loads((index_files_dir(tmp_path / "idx") / META_FILE).read_text())["model"] == str(
        moved.resolve()
    )


def test_parts_of_two_splits_or_models_are_refused(small_parts, tiny_bert):
    corpus, parts, tmp_path = small_parts
    shutil.copy(parts / "part-0-of-3.npy", parts / "part-0-of-2.npy")
    with pytest.raises(InputError, match="mixes parts of different splits"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")
    (parts / "part-0-of-2.npy").unlink()
    sidecar = parts / "part-2-of-3.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "model_fingerprint": "0" * 16}))
    with pytest.raises(InputError, match="come from different models"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx")


def test_gpu_without_faiss_gpu_is_an_input_error(small_parts):
    if faiss.get_num_gpus() > 0:
        pytest.skip("faiss sees a GPU here")
    corpus, parts, tmp_path = small_parts
    with pytest.raises(InputError, match="faiss sees no GPU"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx", runtime=Runtime("cuda"))


@pytest.mark.parametrize(("quantize", "dim"), [("int8", None), ("binary", None), (None, 16), ("binary", 16)])
def test_quantize_and_dim_from_parts_build_what_one_pass_builds(tmp_path, tiny_bert, quantize, dim):
    """Codes, float vectors and hits of `--from-vectors` with --quantize/--dim equal a one-pass build's;
    the hits are exact search over the first `dim` dimensions, renormalized (numpy, by hand)."""
    rng = np.random.default_rng(8)
    docs, queries = rng.standard_normal((61, DIM)).astype(np.float32), rng.standard_normal((7, DIM))
    corpus, encoder, ids = corpus_and_encoder(tmp_path, tiny_bert, docs)
    parts = write_parts(corpus, tmp_path / "parts", encoder, 4, chunk_size=5)
    built = {"kind": "flat", "quantize": quantize, "dim": dim}
    report = build_index_from_vectors(
        parts, corpus, tmp_path / "parts-idx", options=CorpusOptions(chunk_size=3), **built
    )
    build_index(
        corpus, tmp_path / "one-pass", encoder, IndexOptions(**built, corpus=CorpusOptions(chunk_size=8))
    )
    kept = dim or DIM
    prefix = docs[:, :kept] / np.linalg.norm(docs[:, :kept], axis=1, keepdims=True)
    meta = json.loads((index_files_dir(tmp_path / "parts-idx") / META_FILE).read_text())
    assert (report.count, meta["dim"], meta.get("model_dim"), meta["params"].get("quantize")) == (
        61,
        kept,
        DIM if dim else None,
        quantize,
    )
    files = [index_files_dir(tmp_path / name) for name in ("parts-idx", "one-pass")]
    if quantize:
        read = faiss.read_index_binary if quantize == "binary" else faiss.read_index
        codes = [faiss.serialize_index_binary(read(str(f / INDEX_FILE))) if quantize == "binary"
                 else faiss.serialize_index(read(str(f / INDEX_FILE))) for f in files]  # fmt: skip
        assert np.array_equal(codes[0], codes[1])
        np.testing.assert_allclose(np.load(files[0] / "vectors.npy"), prefix, atol=1e-6)
    cut = queries[:, :kept]
    hits = []
    for name in ("parts-idx", "one-pass"):
        with SearchIndex.load(tmp_path / name) as index:
            hits.append(index.search(cut, k=5))
    assert hits[0][1] == hits[1][1]
    want_scores, want_rows = brute_force(docs[:, :kept], cut, 5)
    if quantize == "binary":  # 32 signs rank coarsely: the rescored hits' scores are exact cosines
        unit = prefix.astype(np.float64)
        exact = [
            [float(unit[ids.index(i)] @ (q / np.linalg.norm(q))) for i in row]
            for q, row in zip(cut, hits[0][1], strict=True)
        ]
        np.testing.assert_allclose(hits[0][0], exact, atol=1e-5)
        return
    for scores, found in hits:
        assert found == [[ids[r] for r in row] for row in want_rows]
        np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_dim_beyond_the_parts_is_refused(small_parts):
    corpus, parts, tmp_path = small_parts
    with pytest.raises(InputError, match="--dim 33: the parts hold 32-d vectors; use 1 to 32"):
        build_index_from_vectors(parts, corpus, tmp_path / "idx", dim=33)
    assert not (tmp_path / "idx").exists()
