"""`embed_to_file`: streaming chunks into a memory-mapped .npy, ids beside it, written atomically."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_helpers import write_jsonl

from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError
from embedkit.jobs.streaming import CorpusOptions, embed_to_file


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    return load_encoder(tiny_bert, device="cpu")


def test_chunks_give_the_vectors_of_one_call_in_corpus_order(tmp_path, encoder, sentences):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    options = CorpusOptions(chunk_size=5, batch_size=2)
    report = embed_to_file(corpus, tmp_path / "out.npy", encoder, options=options)
    vectors = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(vectors, encoder.encode(sentences), atol=1e-5)
    ids = (tmp_path / "out.ids.txt").read_text(encoding="utf-8").splitlines()
    assert ids == [str(i) for i in range(1, len(sentences) + 1)]  # a .txt corpus: line numbers
    assert (report.count, report.dim, report.ids_path) == (len(sentences), 32, tmp_path / "out.ids.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "out.ids.txt", "out.npy"]


def test_jsonl_ids_titles_and_normalize_override(tmp_path, tiny_bert_no_types):
    encoder = load_encoder(tiny_bert_no_types, device="cpu")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"_id": "d1", "title": "wing", "text": "flow is high"}\n\n{"_id": "d2", "text": "the cat"}\n',
        encoding="utf-8",
    )
    embed_to_file(corpus, tmp_path / "v.npy", encoder, normalize=True)
    vectors = np.load(tmp_path / "v.npy")
    expected = encoder.encode(["wing flow is high", "the cat"], normalize=True)  # title + " " + text
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert (tmp_path / "v.ids.txt").read_text().splitlines() == ["d1", "d2"]
    raw = embed_to_file(corpus, tmp_path / "raw.npy", encoder)  # this model has no Normalize module
    assert raw.count == 2
    assert not np.allclose(np.linalg.norm(np.load(tmp_path / "raw.npy"), axis=1), 1.0)


def test_a_failure_mid_corpus_leaves_the_previous_output(tmp_path, encoder):
    out = tmp_path / "out.npy"
    np.save(out, np.zeros((1, 32), dtype=np.float32))
    (tmp_path / "out.ids.txt").write_text("old\n")
    corpus = tmp_path / "c.jsonl"
    lines = [f'{{"_id": "{i}", "text": "doc {i}"}}' for i in range(7)] + ["{not json"]
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 8 is not valid JSON"):
        embed_to_file(corpus, out, encoder, options=CorpusOptions(chunk_size=3))
    np.testing.assert_array_equal(np.load(out), np.zeros((1, 32)))
    assert (tmp_path / "out.ids.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "out.ids.txt", "out.npy"]


def test_bad_inputs(tmp_path, encoder):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(InputError, match="empty corpus"):
        embed_to_file(empty, tmp_path / "o.npy", encoder)
    with pytest.raises(InputError, match="must be a .npy file"):
        embed_to_file(empty, tmp_path / "o.bin", encoder)
    broken_id = write_jsonl(tmp_path / "c.jsonl", ["a\nb"], ["text"])
    with pytest.raises(InputError, match="contains a line break"):
        embed_to_file(broken_id, tmp_path / "o.npy", encoder)
    with pytest.raises(InputError, match="chunk size must be at least 1"):
        CorpusOptions(chunk_size=0)
    assert not (tmp_path / "o.npy").exists()
