"""Every field of `embedkit-index.json` checked, so a damaged file is one clear error, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.errors import InputError

KIND_NAMES = ("flat", "hnsw", "ivf-pq")


def _fail(path: Path, key: str, what: str, value: Any) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InputError(f"{path}: {key!r} must be {what}, got {shown}: the index metadata is damaged")


def _int(meta: dict[str, Any], key: str, path: Path, minimum: int) -> None:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(path, key, f"an integer >= {minimum}", value)


def validate_index_meta(meta: Any, path: Path) -> None:
    """An `InputError` naming the first field of `meta` that has the wrong type or value."""
    if not isinstance(meta, dict):
        raise InputError(f"{path} is not a JSON object: the index metadata is damaged")
    _int(meta, "dim", path, 1)
    _int(meta, "count", path, 0)
    _int(meta, "index_bytes", path, 1)
    for key in ("model", "model_fingerprint"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise _fail(path, key, "a non-empty string", meta.get(key))
    if meta.get("kind") not in KIND_NAMES:
        raise _fail(path, "kind", f"one of {', '.join(KIND_NAMES)}", meta.get("kind"))
    if not isinstance(meta.get("params"), dict):
        raise _fail(path, "params", "an object", meta.get("params"))
    if "normalized" in meta and not isinstance(meta["normalized"], bool):
        raise _fail(path, "normalized", "true or false", meta["normalized"])
    if meta.get("corpus_fingerprint") is not None and not isinstance(meta["corpus_fingerprint"], str):
        raise _fail(path, "corpus_fingerprint", "a string or null", meta["corpus_fingerprint"])
    if "sources" in meta and not isinstance(meta["sources"], list):
        raise _fail(path, "sources", "a list", meta["sources"])
    for key in ("created", "updated", "kind_reason", "metric", "model_backend"):
        if key in meta and not isinstance(meta[key], str):
            raise _fail(path, key, "a string", meta[key])
    if "max_seq_length" in meta:
        _int(meta, "max_seq_length", path, 1)
    if meta.get("lexical") is not None:
        from embedkit.index.lexical import LexicalSettings, is_current_format

        try:
            if not isinstance(meta["lexical"], dict):
                raise InputError("not an object")
            if is_current_format(meta["lexical"]):  # else an earlier embedkit's: `--reindex-lexical`
                LexicalSettings.from_json(meta["lexical"])
        except (InputError, TypeError) as exc:
            raise _fail(path, "lexical", f"lexical settings or null ({exc})", meta["lexical"]) from None
