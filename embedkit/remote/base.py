"""The seam between embedkit and a search server: targets, the push record, the adapter protocol.

A target is a URI and a collection name: `milvus://HOST:PORT` (a Milvus server) or a path ending
in `.db` (a Milvus Lite file, created by the first push). `is_remote` tells a target from an index
folder, so commands that take an index take a target too. An adapter (`RemoteCollection`) keeps
each document under its index row (the FAISS position, 0-based), so pushing a row twice stores
it once (upsert): a push that was killed is finished by running it again.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from embedkit.errors import InputError
from embedkit.remote.engines import ENGINES, LITE_SCHEME

if TYPE_CHECKING:
    import numpy as np

    from embedkit.data.corpus import Document

LITE_SUFFIX = ".db"
DEFAULT_COLLECTION = "embedkit"
TOKEN_ENV = "MILVUS_TOKEN"
RECORD_FORMAT = 1
# Milvus's rule for collection names: a letter or underscore, then letters, digits, underscores.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_URI = re.compile(r"(?P<scheme>[a-z]+)://(?P<host>[^/:\s]+):(?P<port>\d{1,5})/?")


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` names a search server target (a URI, or a Milvus Lite `.db` file)."""
    text = os.fspath(location)
    return "://" in text or text.endswith(LITE_SUFFIX)


@dataclass(frozen=True)
class RemoteTarget:
    """Where a collection lives: `uri` as given, the engine, its address, the collection, a token."""

    uri: str
    collection: str = DEFAULT_COLLECTION
    token: str = field(default="", repr=False)  # never printed

    @classmethod
    def parse(cls, uri: str, collection: str | None = None, token: str | None = None) -> RemoteTarget:
        """A checked target; the token defaults to $MILVUS_TOKEN. Bad input is an `InputError`."""
        name = collection or DEFAULT_COLLECTION
        if not _NAME.fullmatch(name):
            raise InputError(
                f"bad collection name {name!r}: a letter or _, then letters, digits or _ (255 at most)"
            )
        if "://" in uri:
            match = _URI.fullmatch(uri)
            if match is None or match["scheme"] not in ENGINES or not 0 < int(match["port"]) < 65536:
                raise InputError(f"bad search server URI {uri!r}: use milvus://HOST:PORT or a FILE.db path")
        elif not uri.endswith(LITE_SUFFIX):
            raise InputError(f"bad search server URI {uri!r}: use milvus://HOST:PORT or a FILE.db path")
        return cls(uri, name, token if token is not None else os.environ.get(TOKEN_ENV, ""))

    @property
    def is_local_file(self) -> bool:
        return "://" not in self.uri

    def __str__(self) -> str:
        return f"{self.uri} collection {self.collection}"


@dataclass(frozen=True)
class PushRecord:
    """What a collection holds, written by every push (the collection's metadata record).

    Search embeds queries with `model` (checked by `model_fingerprint`); a push of vectors of
    another model is refused; `count` is the rows pushed so far (0..count-1 when complete).
    """

    model: str
    model_fingerprint: str
    dim: int
    count: int  # rows the last complete push left in the collection
    model_backend: str = "torch"
    max_seq_length: int | None = None
    corpus_fingerprint: str | None = None
    index_id: str = ""  # the pushed index's `index_id` (empty for part files and older indexes)
    index_created: str = ""  # the pushed index's `created` (empty for part files)
    index_updated: str = ""
    index_format: int | None = None  # embedkit-index.json's format version (None for part files)
    source: str = ""  # the index folder or part folder pushed
    pushed: str = ""  # when
    lexical: dict[str, Any] | None = None  # the server-side analyzer's settings
    metadata_fields: dict[str, list[str]] | None = None  # `DocStore.metadata_fields`: checks `--where`
    # the pushed index's calibrated fusion (`embedkit.search.request.Calibration`, its `fusion`
    # metadata), so a search of the collection defaults to what the index's does; None: the default
    fusion: dict[str, Any] | None = None
    # the model's dimension where the pushed index keeps only the first `dim` of each vector
    # (`index --dim`): queries are cut the same way; None: the model's own
    model_dim: int | None = None
    format: int = RECORD_FORMAT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> PushRecord:
        """A checked record; an `InputError` when it is not one embedkit wrote."""
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise InputError(f"{where} holds no embedkit push record (format {RECORD_FORMAT})")
        try:
            record = cls(**{key: value for key, value in data.items() if key in known})
        except TypeError as exc:
            raise InputError(f"{where}: damaged push record ({exc})") from None
        if (
            not isinstance(record.dim, int)
            or not isinstance(record.count, int)
            or not record.model_fingerprint
            or not (
                record.model_dim is None
                or (isinstance(record.model_dim, int) and record.model_dim > record.dim)
            )
        ):
            raise InputError(f"{where}: damaged push record (dim, model_dim, count or model fingerprint)")
        if record.fusion is not None:
            from embedkit.search.request import Calibration

            try:
                Calibration.from_json(record.fusion)
            except InputError as exc:
                raise InputError(f"{where}: damaged push record (fusion: {exc})") from None
        return record

    def as_index_meta(self) -> dict[str, Any]:
        """The fields of `embedkit-index.json` that searching reads (`SearchIndex.meta`)."""
        return {
            "model": self.model,
            "model_fingerprint": self.model_fingerprint,
            "model_backend": self.model_backend,
            "max_seq_length": self.max_seq_length,
            "dim": self.dim,
            "model_dim": self.model_dim,
            "count": self.count,
            "kind": "remote",
            "params": {},
            "corpus_fingerprint": self.corpus_fingerprint,
            "lexical": self.lexical,
            "normalized": True,
            "created": self.index_created,
            "updated": self.index_updated,
            "fusion": self.fusion,
        }


class RemoteCollection(Protocol):
    """What an engine adapter does; rows are index rows, scores higher-is-better."""

    target: RemoteTarget

    def exists(self) -> bool: ...
    def create(self, dim: int, record: PushRecord, dense_index: str) -> None: ...
    def dim(self) -> int: ...
    def read_record(self) -> PushRecord | None: ...
    def write_record(self, record: PushRecord) -> None: ...
    def count(self) -> int: ...
    def rows_present(self, start: int, stop: int) -> set[int]: ...
    def upsert(self, rows: list[int], documents: list[Document], vectors: np.ndarray) -> None: ...
    def delete(self, rows: list[int]) -> None: ...
    def flush(self) -> None: ...  # the writes sealed and indexed, once a push is complete
    # `where`: the engine's filter expression of a `--where` (empty: none)
    def search_dense(self, vectors: np.ndarray, k: int, where: str = "") -> list[list[tuple[int, float]]]: ...
    def search_lexical(self, texts: list[str], k: int, where: str = "") -> list[list[tuple[int, float]]]: ...
    def documents(self, rows: list[int]) -> dict[int, Document]: ...
    def vectors(self, rows: list[int]) -> np.ndarray: ...
    def rows_of_ids(self, ids: list[str]) -> dict[str, int]: ...
    def close(self) -> None: ...


def open_collection(target: RemoteTarget, *, create: bool = False) -> RemoteCollection:
    """The adapter for `target`'s engine, connected (the registry in `engines` picks it); an
    unreachable server is an `InputError`. A local file target is created only with `create` (a
    push); a reader is refused a missing one.
    """
    import importlib

    scheme = target.uri.split("://", 1)[0] if "://" in target.uri else LITE_SCHEME
    module_name, class_name = ENGINES[scheme].split(":")
    adapter = getattr(importlib.import_module(module_name), class_name)
    return adapter.connect(target, create=create)
