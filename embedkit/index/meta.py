"""`embedkit-index.json`, an index version's metadata: one schema, written, read and checked here.

Every build (`build.py`, `from_vectors.py`, `rebuild_lexical`) writes an `IndexMeta`; every reader
gets its fields checked (`IndexMeta.from_json`), so a damaged file is one clear error, never a
traceback. Readers that index the metadata as a dict (`read_index_meta` in `folder.py`) get
`IndexMeta.to_json()` of a checked record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from embedkit.errors import InputError
from embedkit.index.kinds import BUILT_KINDS

FORMAT_VERSION = 1
REQUIRED = ("version", "model", "model_fingerprint", "dim", "kind", "params", "count", "index_bytes")


def now() -> str:
    """The time stamp of `created` and `updated`: UTC, seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_index_id() -> str:
    """An index's identity, drawn when it is created: two indexes built in the same second differ.

    `created` alone could not tell them apart (it has a resolution of seconds), and `push --append`
    must never finish one index's rows with another's (`embedkit.remote.push`).
    """
    return uuid.uuid4().hex


@dataclass(frozen=True)
class IndexMeta:
    """What an index version holds and how it was built."""

    model: str  # the model folder queries are embedded with
    model_fingerprint: str  # `embedkit.encode.identity.model_fingerprint` of that model
    dim: int  # the vectors' dimension: the model's, or the first `dim` of them (`model_dim`)
    kind: str  # flat, hnsw or ivf-pq (`embedkit.index.kinds`)
    params: dict[str, Any]  # the kind's parameters
    count: int  # vectors: documents, or passages where `passages` is set
    index_bytes: int  # the size of index.faiss, checked on load
    model_backend: str = "torch"
    model_relative: str | None = None  # the same folder relative to the index's own (`folder.locate_model`)
    max_seq_length: int | None = None
    kind_reason: str = ""  # why this kind: auto's choice, "asked for", ...
    lexical: dict[str, Any] | None = None  # the lexical side's settings (`embedkit.index.lexical`)
    corpus_fingerprint: str | None = None  # `embedkit.index.corpus_fingerprint` of what it holds
    created: str = ""
    updated: str = ""
    # `new_index_id()` at creation; appends, edits and compaction keep it, a copy of the folder shares
    # it; empty in an index an earlier embedkit built
    index_id: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)  # each build or append's corpus
    fusion: dict[str, Any] | None = None  # the calibrated fusion (`embedkit.search.request.Calibration`)
    passages: dict[str, Any] | None = None  # `embedkit.index.passages.PassageSettings`; None: whole documents
    documents: int | None = None  # documents held where they differ from `count` (passages); None: = count
    query_prefix: str = ""  # put before every query the model embeds (`embedkit.encode.prefixes`)
    passage_prefix: str = ""  # put before every document or passage the model embeds
    # the model's dimension where the index keeps only the first `dim` of its vectors, renormalized
    # (`index --dim`, `embedkit.encode.dimensions`); None: the model's own, `dim`
    model_dim: int | None = None
    metric: str = "inner_product"  # vectors are L2-normalised: inner product = cosine
    normalized: bool = True
    version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def updated_now(self, **changes: Any) -> IndexMeta:
        """This record with `changes` and `updated` set to now."""
        return replace(self, **changes, updated=now())

    @classmethod
    def from_json(cls, data: Any, path: Path) -> IndexMeta:
        """A checked record; an `InputError` naming the file and the first field that is wrong.

        Fields an older embedkit did not write take their defaults; unknown fields are ignored.
        """
        if not isinstance(data, dict):
            raise InputError(f"{path} is not a JSON object: the index metadata is damaged")
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise InputError(f"{path} lacks {', '.join(missing)}: rebuild the index")
        if data["version"] != FORMAT_VERSION:
            raise InputError(
                f"{path.parent} is index format {data['version']!r}; this embedkit reads {FORMAT_VERSION}"
            )
        _check(data, path)
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def _fail(path: Path, key: str, what: str, value: Any) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputError(f"{path}: {key!r} must be {what}, got {shown}: the index metadata is damaged")


def _int(meta: dict[str, Any], key: str, path: Path, minimum: int) -> None:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(path, key, f"an integer >= {minimum}", value)


def _check(meta: dict[str, Any], path: Path) -> None:
    """Every field's type and value."""
    _int(meta, "dim", path, 1)
    _int(meta, "count", path, 0)
    _int(meta, "index_bytes", path, 1)
    for key in ("model", "model_fingerprint"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise _fail(path, key, "a non-empty string", meta.get(key))
    if meta.get("kind") not in BUILT_KINDS:
        raise _fail(path, "kind", f"one of {', '.join(BUILT_KINDS)}", meta.get("kind"))
    if not isinstance(meta.get("params"), dict):
        raise _fail(path, "params", "an object", meta.get("params"))
    if "normalized" in meta and not isinstance(meta["normalized"], bool):
        raise _fail(path, "normalized", "true or false", meta["normalized"])
    if meta.get("corpus_fingerprint") is not None and not isinstance(meta["corpus_fingerprint"], str):
        raise _fail(path, "corpus_fingerprint", "a string or null", meta["corpus_fingerprint"])
    if "sources" in meta and not isinstance(meta["sources"], list):
        raise _fail(path, "sources", "a list", meta["sources"])
    for key in (
        "created",
        "updated",
        "index_id",
        "kind_reason",
        "metric",
        "model_backend",
        "query_prefix",
        "passage_prefix",
    ):
        if key in meta and not isinstance(meta[key], str):
            raise _fail(path, key, "a string", meta[key])
    if meta.get("model_relative") is not None and not isinstance(meta["model_relative"], str):
        raise _fail(path, "model_relative", "a string or null", meta["model_relative"])
    if meta.get("max_seq_length") is not None:
        _int(meta, "max_seq_length", path, 1)
    if meta.get("documents") is not None:
        _int(meta, "documents", path, 0)
    if meta.get("model_dim") is not None:
        _int(meta, "model_dim", path, meta["dim"])
    from embedkit.index.passages import PassageSettings
    from embedkit.search.request import Calibration

    _record(meta, "fusion", path, "a calibration record", Calibration.from_json)
    _record(meta, "passages", path, "passage settings", PassageSettings.from_json)
    if meta.get("lexical") is not None:
        from embedkit.index.lexical import LexicalSettings, is_current_format

        try:
            if not isinstance(meta["lexical"], dict):
                raise InputError("not an object")
            if is_current_format(meta["lexical"]):  # else an earlier embedkit's: `--reindex-lexical`
                LexicalSettings.from_json(meta["lexical"])
        except (InputError, TypeError) as exc:
            raise _fail(path, "lexical", f"lexical settings or null ({exc})", meta["lexical"]) from None


def _record(meta: dict[str, Any], key: str, path: Path, what: str, load: Callable[[Any], object]) -> None:
    """`meta[key]`, where set, must load as its record (`load`, a `from_json`)."""
    if meta.get(key) is None:
        return
    try:
        load(meta[key])
    except (InputError, TypeError) as exc:
        raise _fail(path, key, f"{what} or null ({exc})", meta[key]) from None
