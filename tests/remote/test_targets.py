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
