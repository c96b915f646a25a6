"""`embed_shard`: N contiguous parts that concatenate to the single-process `embed_to_file` output."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError
from embedkit.jobs.parts import Shard, read_parts
from embedkit.jobs.sharding import embed_shard
from embedkit.jobs.streaming import CorpusOptions, embed_to_file


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    return load_encoder(tiny_bert, device="cpu")


@pytest.fixture(scope="module")
def single(tmp_path_factory, encoder, tiny_bert):
    """A 23-document jsonl corpus (titles, a blank record skipped) and its single-process embedding."""
    folder = tmp_path_factory.mktemp("shards")
    corpus = folder / "corpus.jsonl"
    records = []
    for i in range(24):
        text = "" if i == 5 else f"the wing flow number {i} {'is high ' * (i % 4)}"
        records.append({"_id": f"doc-{i}", "title": "shock wave" if i % 3 == 0 else "", "text": text})
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    embed_to_file(corpus, folder / "all.npy", encoder, options=CorpusOptions(chunk_size=4))
    ids = (folder / "all.ids.txt").read_text(encoding="utf-8").splitlines()
    assert len(ids) == 23  # the blank record is skipped, as single-process embed does
    return folder, corpus, np.load(folder / "all.npy"), ids, records


@pytest.mark.parametrize("count", [4, 5, 30])  # 23 documents: N divides nothing; 30 leaves parts empty
def test_parts_concatenate_to_the_single_process_output(single, encoder, count, tmp_path):
    _, corpus, vectors, ids, _ = single
    for index in reversed(range(count)):  # any order: shards are independent
        report = embed_shard(
            corpus, tmp_path, Shard(index, count), encoder, options=CorpusOptions(chunk_size=3)
        )
        assert report.total == 23
    parts = [np.load(tmp_path / f"part-{i}-of-{count}.npy") for i in range(count)]
    part_ids = [(tmp_path / f"part-{i}-of-{count}.ids.txt").read_text().splitlines() for i in range(count)]
    np.testing.assert_allclose(np.concatenate(parts), vectors, atol=1e-5)
    assert [i for chunk in part_ids for i in chunk] == ids
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1  # balanced, contiguous ranges
    assert [p.info.start for p in read_parts(tmp_path)] == list(np.cumsum([0, *sizes[:-1]]))


def test_sidecars_describe_each_part(single, encoder, tiny_bert, tmp_path):
    _, corpus, _, ids, records = single
    for index in range(3):
        embed_shard(corpus, tmp_path, Shard(index, 3), encoder)
    infos = [json.loads((tmp_path / f"part-{i}-of-3.json").read_text()) for i in range(3)]
    assert [(i["start"], i["count"], i["total"], i["dim"]) for i in infos] == [
        (0, 7, 23, 32),
        (7, 8, 23, 32),
        (15, 8, 23, 32),
    ]
    assert {i["model"] for i in infos} == {str(tiny_bert.resolve())}
    assert {i["model_fingerprint"] for i in infos} == {encoder.fingerprint}
    # Each part's fingerprint: the sum mod 2**128 of SHA-256[:16] over its documents' (id, title, text).
    kept = [r for r in records if r["text"]]
    for info in infos:
        total = 0
        for r in kept[info["start"] : info["start"] + info["count"]]:
            data = "\x00".join((r["_id"], r["title"], r["text"])).encode()
            total += int.from_bytes(hashlib.sha256(data).digest()[:16], "big")
        assert info["corpus_fingerprint"] == f"{total % (1 << 128):032x}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"part-{i}-of-3{s}" for i in range(3) for s in (".npy", ".ids.txt", ".json")
    )  # no journal, lock or temporary file left


def test_shard_syntax_is_checked():
    assert Shard.parse("0/4") == Shard(0, 4) and Shard.parse(" 3 / 4 ") == Shard(3, 4)
    assert Shard(2, 5).rows(23) == (9, 13)
    for bad in ("4/4", "1/0", "1-of-4", "-1/4", "a/b", "1/4/2"):
        with pytest.raises(InputError, match=r"--shard must be I/N with 0 <= I < N \(I is 0-based"):
            Shard.parse(bad)


def test_out_must_be_a_folder(single, encoder, tmp_path):
    _, corpus, *_ = single
    with pytest.raises(InputError, match="--out must be a folder"):
        embed_shard(corpus, tmp_path / "v.npy", Shard(0, 2), encoder)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="--out must be a folder"):
        embed_shard(corpus, tmp_path / "file", Shard(0, 2), encoder)
