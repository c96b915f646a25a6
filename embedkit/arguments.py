"""The Python API's arguments, checked on entry: a wrong type or value is an `InputError` naming
the argument, never a `TypeError` from deep inside numpy, SQLite or the filter's parser.

The collection API (`embedkit.collection`) and `SearchIndex`'s search calls check what they are
given here (docs/guarantees.md, "The Python API checks its arguments"). Each function takes the
argument's name as the caller spells it, so the message names what to change.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from embedkit.data.values import check_id, check_text, number_problem
from embedkit.errors import InputError


def _shown(value: Any) -> str:
    """A value as an error line shows it: its type, and its repr where that is short."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 4:  # never the repr of a deep one
        return type(value).__name__
    if isinstance(value, numbers.Integral) and number_problem(int(value)) is not None:
        return f"{type(value).__name__} beyond 64 bits"  # repr() of over 4,300 digits is a ValueError
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 and "\n" not in text else type(value).__name__


def whole_number(name: str, value: Any, *, least: int = 1) -> int:
    """`value` as an int of at least `least` (numpy's integers too; never a bool, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be a whole number, not {_shown(value)}")
    number = int(value)
    if number < least:
        raise InputError(f"{name} must be at least {least}, got {_shown(number)}")
    return number


def optional_text(name: str, value: Any) -> str | None:
    """None, or `value` as a non-empty string (a name such as a mode or a fusion)."""
    if value is None:
        return None
    return text(name, value)


def text(name: str, value: Any) -> str:
    """`value` as a non-empty string (a setting such as a device or an index kind)."""
    if not isinstance(value, str) or not value:
        raise InputError(f"{name} must be a non-empty string, not {_shown(value)}")
    return check_text(value, name)


def flag(name: str, value: Any) -> bool:
    """`value` as a bool (True or False: not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, not {_shown(value)}")
    return value


def folder(name: str, value: Any) -> Path:
    """`value` (a string or a path) as a `Path` that the file system can be asked about."""
    if not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{name} must be a path (a string or a Path), not {_shown(value)}")
    spelled = os.fspath(value)
    if not isinstance(spelled, str) or not spelled or "\0" in spelled:
        raise InputError(f"{name} must be a non-empty path without NUL characters, not {spelled!r}")
    check_text(spelled, name)
    return Path(spelled)


def encoder_or_folder(name: str, value: Any) -> Any:
    """None, a model folder's path, or an open encoder (anything with `encode`)."""
    if value is None or isinstance(value, (str, os.PathLike)):
        return value if value is None else folder(name, value)
    from embedkit.encode.protocol import Encodes

    if isinstance(value, Encodes) and not isinstance(value, bytes):
        return value
    raise InputError(f"{name} must be a model folder's path or an open encoder, not {_shown(value)}")


def names(name: str, value: Any) -> list[str]:
    """`value` as a list of names (strings; possibly empty): an `include`."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"{name} must be a list of names, not {_shown(value)}")
    listed = list(value)
    for position, item in enumerate(listed):
        if not isinstance(item, str):
            raise InputError(f"{name}[{position}] must be a name (a string), not {_shown(item)}")
    return listed


def optional_weight(name: str, value: Any) -> float | None:
    """None, or `value` as a float in [0, 1] (a fusion's dense weight)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InputError(f"{name} must be a number in [0, 1], not {_shown(value)}")
    return float(value)


def text_list(
    name: str, value: Any, *, one: bool = True, blank: bool = False, empty: bool = False
) -> list[str]:
    """`value` as a list of strings (`one`: a single string is a list of one, as in Chroma); an
    empty list is refused unless `empty`, an empty or blank string unless `blank`."""
    if isinstance(value, str) and one:
        value = [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InputError(f"{name} must be a list of strings, not {_shown(value)}")
    listed = list(value)
    if not listed and not empty:
        raise InputError(f"{name} is empty: give at least one")
    for position, item in enumerate(listed):
        if not isinstance(item, str):
            raise InputError(f"{name}[{position}] must be a string, not {_shown(item)}")
        if not blank and not item.strip():
            raise InputError(f"{name}[{position}] is empty")
        check_text(item, f"{name}[{position}]")
    return listed


def id_list(name: str, value: Any) -> list[str]:
    """`value` as a list of ids: non-empty strings, valid Unicode (a single id is a list of one)."""
    listed = text_list(name, value, blank=True)
    return [check_id(doc_id, f"{name}[{position}]") for position, doc_id in enumerate(listed)]  # one id check


def metadata_list(name: str, value: Any, count: int) -> list[dict[str, Any] | None]:
    """`value` as `count` metadata dicts or None (a single dict for a single document, as in Chroma)."""
    if value is None:
        return [None] * count
    if isinstance(value, Mapping):
        value = [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InputError(f"{name} must be a list of dicts, one per document, not {_shown(value)}")
    listed = list(value)
    for position, item in enumerate(listed):
        if item is not None and not isinstance(item, Mapping):
            raise InputError(f"{name}[{position}] must be a dict or None, not {_shown(item)}")
        if item is not None and any(not isinstance(key, str) for key in item):
            raise InputError(f"{name}[{position}]: every field name is a string")
    return [None if item is None else dict(item) for item in listed]


def vector_like(value: Any) -> bool:
    """Whether `value` is a vector or vectors (an array, numbers, lists of numbers), not texts:
    how Chroma's `query(query_embeddings)` is told from embedkit's `query(texts)` when positional."""
    if isinstance(value, (str, bytes, Mapping)) or value is None:
        return False
    if hasattr(value, "__array__"):
        return True
    if not isinstance(value, Sequence) or not value:
        return False
    first = value[0]
    if isinstance(first, numbers.Real) and not isinstance(first, bool):
        return True
    return hasattr(first, "__array__") or (
        isinstance(first, Sequence) and not isinstance(first, (str, bytes))
    )


def query_vectors(name: str, value: Any) -> Any:  # -> np.ndarray float32 [q, dim]
    """`value` as a float32 matrix of finite numbers, one row per query (one vector: one row)."""
    import numpy as np

    if isinstance(value, (str, bytes, Mapping)):
        raise InputError(f"{name} must be vectors of numbers, not {_shown(value)}")
    try:
        vectors = np.asarray(value)
    except (ValueError, TypeError):  # ragged lists
        raise InputError(f"{name} must be vectors of numbers of one length") from None
    real = np.issubdtype(vectors.dtype, np.integer) or np.issubdtype(vectors.dtype, np.floating)
    if vectors.dtype == bool or not real:
        raise InputError(f"{name} must be vectors of numbers, not {vectors.dtype} values")
    if not np.isfinite(vectors).all():
        raise InputError(f"{name} holds a NaN or an infinite number")
    with np.errstate(over="ignore"):  # beyond float32: infinite, refused below
        vectors = vectors.astype(np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    if vectors.ndim != 2 or not vectors.size:
        raise InputError(
            f"{name} must be a vector or a list of vectors, not an array of shape {vectors.shape}"
        )
    if not np.isfinite(vectors).all():
        raise InputError(f"{name} holds a number beyond 32-bit floats")
    return vectors


def refuse_unknown(method: str, unknown: Mapping[str, Any], takes: str) -> None:
    """An `InputError` naming the first keyword `method` does not take (Chroma's too: what
    embedkit does not do is refused, never ignored)."""
    if unknown:
        name = next(iter(unknown))
        raise InputError(f"{method}() has no argument {name!r}: it takes {takes}")
