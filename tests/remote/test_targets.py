"""Targets as the CLI takes them: URI forms, collection names, the token from the environment."""

from __future__ import annotations

import pytest

from embedkit.errors import InputError
from embedkit.remote.base import DEFAULT_COLLECTION, PushRecord, RemoteTarget, is_remote


def test_uris_names_and_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILVUS_TOKEN", "root:Milvus")
    target = RemoteTarget.parse("milvus://db.example:19530")
    assert (target.collection, target.token, target.is_local_file) == (
        DEFAULT_COLLECTION,
        "root:Milvus",
        False,
    )
    assert RemoteTarget.parse("milvus://10.0.0.2:19530/", "c_1", token="k").token == "k"  # --token wins
    assert RemoteTarget.parse("data/cranfield.db", "_x").is_local_file
    assert "root:Milvus" not in str(target) and "root:Milvus" not in repr(target)
    for uri in (
        "milvus://host",
        "milvus://host:0",
        "milvus://host:99999",
        "http://h:1",
        "folder",
        "x.db.bak",
    ):
        with pytest.raises(InputError, match="bad search server URI"):
            RemoteTarget.parse(uri)
    for name in ("", "1abc", "a-b", "a b", "x" * 256, "é"):
        with pytest.raises(InputError, match="bad collection name"):
            RemoteTarget.parse("m.db", name or "-")
    assert is_remote("milvus://h:1") and is_remote("a/b.db") and not is_remote("index-folder")


def test_a_push_record_is_checked_when_read() -> None:
    record = PushRecord(model="m", model_fingerprint="f", dim=384, count=10)
    assert PushRecord.from_json(record.to_json(), "t") == record
    assert record.as_index_meta()["dim"] == 384
    for damaged in (None, {}, {**record.to_json(), "format": 99}, {**record.to_json(), "dim": "384"}):
        with pytest.raises(InputError):
            PushRecord.from_json(damaged, "t")


def test_a_push_records_fusion_is_checked_and_read_as_the_index_meta() -> None:
    fusion = {"method": "zscore", "alpha": 0.6, "reason": "chosen"}
    record = PushRecord(model="m", model_fingerprint="f", dim=384, count=10, fusion=fusion)
    assert PushRecord.from_json(record.to_json(), "t").as_index_meta()["fusion"] == fusion
    assert PushRecord(model="m", model_fingerprint="f", dim=4, count=1).as_index_meta()["fusion"] is None
    for bad in ({"method": "borda", "alpha": 0.5}, {"method": "zscore", "alpha": 2}, "zscore"):
        with pytest.raises(InputError, match="damaged push record"):
            PushRecord.from_json({**record.to_json(), "fusion": bad}, "t")
