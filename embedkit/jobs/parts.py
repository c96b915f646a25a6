"""Part files: a corpus's vectors split into shards, written on one or many machines, read back checked.

A corpus of n documents (in the order `read_corpus` yields them, blank documents skipped) is cut into
N contiguous ranges: shard I (0-based) holds documents [I*n//N, (I+1)*n//N). Contiguous ranges
mean the parts, concatenated in shard order, are exactly the single-process `embedkit embed`
output, and any shard can be computed from the corpus file alone, with no coordinator. Shard I of
N is three files in one folder, written together (`embedkit.storage.atomic.atomic_files`):

- `part-I-of-N.npy`: float32 [count, dim], row j = document start + j;
- `part-I-of-N.ids.txt`: their ids, one per line (as `FILE.ids.txt` of `embed_to_file`);
- `part-I-of-N.json`: what a later index build checks without re-embedding: the shard, its row
  range and the corpus's document count, the vectors' shape, the model that made them (path,
  fingerprint, backend, maximum length) and the fingerprint of the part's documents
  (`embedkit.data.fingerprint`: the sum over the parts is the corpus's fingerprint).

`read_parts` refuses a folder whose set of parts is incomplete (naming the missing ones) or
whose parts disagree with their sidecars or with each other: a truncated `.npy`, a wrong
dimension, an ids file of another length, parts of two different models.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import asdict, dataclass, fields
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.fingerprint import CorpusFingerprint, combined
from embedkit.data.input_files import check_input_file, open_input, read_input_text
from embedkit.encode.model_folder import ModelSpec, read_model_spec
from embedkit.errors import InputError
from embedkit.jobs.streaming import CorpusOptions, read_corpus
from embedkit.progress import ProgressBar

PART_FORMAT = 1
_NAME = re.compile(r"^part-(\d+)-of-(\d+)\.(npy|ids\.txt|json)$")
_SUFFIXES = (".npy", ".ids.txt", ".json")
_MAX_NAMED = 8  # missing parts named in one error line


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count` contiguous ranges of a corpus's documents."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise InputError(
                f"--shard must be I/N with 0 <= I < N (I is 0-based), got {self.index}/{self.count}"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """`"I/N"` -> Shard(I, N); anything else is an `InputError` with the expected form."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None:
            raise InputError(f"--shard must be I/N with 0 <= I < N (I is 0-based, e.g. 0/4), got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def rows(self, total: int) -> tuple[int, int]:
        """The shard's document range [start, stop) in a corpus of `total` documents."""
        return self.index * total // self.count, (self.index + 1) * total // self.count

    @property
    def name(self) -> str:
        return f"part-{self.index}-of-{self.count}"


def part_paths(folder: str | Path, shard: Shard) -> tuple[Path, Path, Path]:
    """The shard's `.npy`, `.ids.txt` and `.json` in `folder`."""
    folder = Path(folder)
    return tuple(folder / f"{shard.name}{suffix}" for suffix in _SUFFIXES)  # type: ignore[return-value]


@dataclass(frozen=True)
class PartInfo:
    """A part's sidecar (`part-I-of-N.json`): enough to check the part and to index it later."""

    shard: int
    shards: int
    start: int  # first document (0-based) of the corpus in this part
    count: int  # documents (rows) in this part
    total: int  # documents in the whole corpus
    dim: int
    model: str  # the model folder that made the vectors (the bundled one for its ONNX form)
    model_fingerprint: str
    model_backend: str
    max_seq_length: int
    normalized: bool | None  # True/False as asked; None: the model's own choice
    corpus: str  # the corpus path as given to the embedding job
    corpus_fingerprint: str  # of this part's documents
    format: int = PART_FORMAT

    @property
    def name(self) -> str:
        return Shard(self.shard, self.shards).name

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, path: Path) -> PartInfo:
        """The sidecar read from `path`, every field checked; an `InputError` names the first bad one."""
        if not isinstance(data, dict):
            raise InputError(f"corrupt part sidecar {path}: not a JSON object")
        if data.get("format") != PART_FORMAT:
            raise InputError(f"{path}: part format {data.get('format')!r}; this embedkit reads {PART_FORMAT}")
        values: dict[str, Any] = {}
        for field in fields(cls):
            value = data.get(field.name)
            if field.name == "normalized":
                ok = value is None or isinstance(value, bool)
            elif field.type == "int":
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            else:
                ok = isinstance(value, str) and (bool(value) or field.name == "corpus")
            if not ok:
                raise InputError(f"corrupt part sidecar {path}: {field.name!r} is {value!r}")
            values[field.name] = value
        info = cls(**values)
        if info.dim < 1 or info.count > info.total or info.start + info.count > info.total:
            raise InputError(f"corrupt part sidecar {path}: rows {info.start}+{info.count} of {info.total}")
        return info


# --- reading a folder of parts -------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One checked part: its sidecar and its two data files."""

    info: PartInfo
    npy: Path
    ids: Path

    def vectors(self) -> np.ndarray:
        """The part's vectors as a read-only memory map (nothing is read until rows are used)."""
        return (
            np.load(self.npy, mmap_mode="r") if self.info.count else np.zeros((0, self.info.dim), np.float32)
        )

    def read_ids(self) -> list[str]:
        return read_input_text(self.ids, "ids file").split("\n")[: self.info.count]


def read_parts(folder: str | Path) -> list[Part]:
    """The complete, consistent set of parts in `folder`, in shard order; an `InputError` otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"part folder not found: {folder}")
    found: dict[int, dict[int, set[str]]] = {}  # N -> I -> suffixes present
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.setdefault(int(match.group(2)), {}).setdefault(int(match.group(1)), set()).add(
                match.group(3)
            )
    if not found:
        raise InputError(f"no part files (part-I-of-N.npy, .ids.txt, .json) in {folder}")
    if len(found) > 1:
        splits = ", ".join(f"{n} parts" for n in sorted(found))
        raise InputError(f"{folder} mixes parts of different splits ({splits}): keep one set")
    ((count, present),) = found.items()
    beyond = sorted(i for i in present if i >= count)
    if beyond:
        raise InputError(f"{folder} holds part {beyond[0]} of a split into {count} (parts are 0-based)")
    missing = []
    for i in range(count):
        absent = [suffix for suffix in _SUFFIXES if suffix[1:] not in present.get(i, set())]
        name = Shard(i, count).name
        missing += [name] if len(absent) == len(_SUFFIXES) else [name + suffix for suffix in absent]
    if missing:
        more = len(missing) - _MAX_NAMED
        named = ", ".join(missing[:_MAX_NAMED]) + (f" and {more} more" if more > 0 else "")
        raise InputError(f"incomplete parts in {folder}: missing {named}")
    parts = [_read_part(folder, Shard(i, count)) for i in range(count)]
    _check_together(parts, folder)
    return parts


def _read_part(folder: Path, shard: Shard) -> Part:
    npy, ids, sidecar = part_paths(folder, shard)
    for path in (npy, ids, sidecar):
        check_input_file(path, "part file")
    try:
        data = json.loads(read_input_text(sidecar, "part sidecar"))
    except ValueError as exc:  # not JSON, or an integer of over 4,300 digits Python will not convert
        raise InputError(f"corrupt part sidecar {sidecar}: {str(exc)[:200]}") from None
    info = PartInfo.from_json(data, sidecar)
    if (info.shard, info.shards) != (shard.index, shard.count):
        raise InputError(f"{sidecar} describes part {info.shard} of {info.shards}, not {shard.name}")
    _check_npy(npy, info)
    lines = _count_lines(ids)
    if lines != info.count:
        raise InputError(f"part {shard.name}: {ids.name} holds {lines} ids for {info.count} vectors")
    return Part(info, npy, ids)


def _check_npy(path: Path, info: PartInfo) -> None:
    """The `.npy` header says float32 [count, dim], C order, and the file holds every byte of it."""
    name = info.name
    try:
        with open_input(path, "part file", gunzip=False) as fh:
            major, _ = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(fh)
            offset = fh.tell()
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(
            f"part {name}: {path.name} is not a readable .npy ({str(exc).splitlines()[0]})"
        ) from None
    if dtype != np.float32 or fortran or len(shape) != 2:
        raise InputError(f"part {name}: {path.name} holds {dtype} {list(shape)}, not float32 [rows, dim]")
    if shape[1] != info.dim:
        raise InputError(
            f"part {name}: {path.name} holds {shape[1]}-d vectors; its sidecar says {info.dim}-d"
        )
    if shape[0] != info.count:
        raise InputError(f"part {name}: {path.name} holds {shape[0]} vectors; its sidecar says {info.count}")
    size, expected = path.stat().st_size, offset + shape[0] * shape[1] * 4
    if size != expected:
        raise InputError(f"part {name}: {path.name} is truncated or altered ({size} bytes, not {expected})")


def _count_lines(path: Path) -> int:
    lines, last = 0, b"\n"
    with open_input(path, "ids file", gunzip=False) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")  # a last line without its newline still counts


def _check_together(parts: list[Part], folder: Path) -> None:
    """Parts of one corpus split and one model: contiguous rows, one total, one dim, one fingerprint."""
    first = parts[0].info
    row = 0
    for part in parts:
        info = part.info
        if info.total != first.total:
            raise InputError(
                f"parts in {folder} come from corpora of different sizes: {first.name} says {first.total} "
                f"documents, {info.name} {info.total}"
            )
        if info.start != row:
            raise InputError(f"part {info.name} starts at document {info.start}, expected {row}")
        if info.dim != first.dim or info.model_fingerprint != first.model_fingerprint:
            raise InputError(
                f"parts in {folder} come from different models: {first.name} ({first.model}, "
                f"{first.dim}-d) and {info.name} ({info.model}, {info.dim}-d)"
            )
        row += info.count
    if row != first.total:
        raise InputError(
            f"the parts in {folder} hold {row} vectors; their corpus has {first.total} documents"
        )


# --- checks of a set of parts against their model and corpus ---------------------------------------


def model_of_parts(parts: list[Part], model: str | Path | None) -> ModelSpec:
    """The model the index records: `model`, else the parts' own; it must be the parts' model."""
    first = parts[0].info
    if model is None:
        try:
            spec = read_model_spec(first.model)
        except InputError as exc:
            raise InputError(
                f"the parts' model {first.model} cannot be opened here ({exc}): pass --model with that model"
            ) from None
    else:
        spec = read_model_spec(model)
    if spec.dim != first.dim:
        raise InputError(f"model {spec.path} gives {spec.dim}-d vectors; the parts hold {first.dim}-d")
    from embedkit.encode.identity import check_same_model, model_identity

    # the parts may hold int8 vectors: the model at either precision class may have embedded them
    identities = [model_identity(spec, precision) for precision in ("fp32", "int8")]
    match = next((i for i in identities if i.fingerprint == first.model_fingerprint), identities[0])
    check_same_model(first.model_fingerprint, first.model, match.fingerprint, spec.path, "the parts", match)
    return spec


def check_corpus(parts: list[Part], corpus: str | Path, options: CorpusOptions, progress: bool) -> str:
    """Read `corpus` against the parts' ids and fingerprints; the corpus's fingerprint."""
    documents = read_corpus(corpus, options)
    total = parts[0].info.total
    row = 0
    with ProgressBar(total, "checking", enabled=progress, rate_unit="docs/s", transient=True) as bar:
        for part in parts:
            fingerprint = CorpusFingerprint()
            with open_input(part.ids, "ids file", gunzip=False) as raw:
                ids = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
                for line in islice(ids, part.info.count):
                    doc = next(documents, None)
                    if doc is None:
                        raise InputError(
                            f"{corpus} holds {row} documents; the parts were embedded from {total}"
                        )
                    expected = line.rstrip("\n")
                    if str(doc.id) != expected:
                        raise InputError(
                            f"part {part.info.name}: row {row - part.info.start} has id {expected!r}, but "
                            f"document {row + 1} of {corpus} is {doc.id!r}: not the corpus (or order) "
                            "the parts were embedded from"
                        )
                    fingerprint.add_fields(doc.id, doc.title, doc.text)
                    row += 1
            if fingerprint.hex != part.info.corpus_fingerprint:
                raise InputError(
                    f"part {part.info.name}: the texts of its documents in {corpus} are not the ones it was "
                    "embedded from (same ids, other texts): embed that part again"
                )
            bar.advance(part.info.count)
    if next(documents, None) is not None:
        raise InputError(f"{corpus} holds more documents than the {total} the parts were embedded from")
    return combined(*(part.info.corpus_fingerprint for part in parts)) or ""


def normalized(vectors: np.ndarray, part: Part) -> np.ndarray:
    """Unit rows, float32, C order (as `build_index`'s encoder returns them)."""
    out = np.array(vectors, dtype=np.float32, order="C")
    if not np.all(np.isfinite(out)):
        raise InputError(f"part {part.info.name}: {part.npy.name} holds NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)  # a zero row stays zero rather than NaN
    return out
