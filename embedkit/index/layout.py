"""What an index folder is on disk: its file names, which folders are indexes, and where new ones may go.

INDEX_DIR holds
- `index.faiss`: L2-normalized vectors, inner product (= cosine similarity), always in CPU form;
- `docs.sqlite`: the documents (`embedkit.index.docstore`); FAISS position i is the document at row i;
- `embedkit-index.json`: model path and fingerprint, dim, metric, kind and parameters, count, times,
  the corpus fingerprint (`embedkit.index.corpus_fingerprint`);
- `checksums.json`: every file's size and SHA-256, checked on load.
These live in a version subfolder named by INDEX_DIR/CURRENT (`embedkit.storage.versioned`), so that a
build or append replaces them in one step; an index written before versions (the files directly in
INDEX_DIR, no checksums) is still read. An index deletes what lives in it (old versions, the flat
layout's files), so no other output may be written inside one (`check_not_in_index`).

No model is read here: the commands that write models (`export`, `adapt`) check their outputs
with it too.
"""

from __future__ import annotations

import os
from pathlib import Path

from embedkit.errors import InputError
from embedkit.storage.outputs import resolved
from embedkit.storage.version_names import MARKER, POINTER
from embedkit.storage.versioned import current_dir, holds_no_version

META_FILE = "embedkit-index.json"
INDEX_FILE = "index.faiss"
DOCS_FILE = "docs.sqlite"


def index_files_dir(path: str | Path) -> Path:
    """The folder that holds an index's files: its live version, or `path` itself (older layout)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"index folder not found: {path}")
    return current_dir(path)


def is_index_folder(path: Path) -> bool:
    """Whether `path` is an embedkit index folder: a versioned folder (marker or pointer), or an
    index of the older flat layout (its metadata file at the top)."""
    return path.is_dir() and any((path / name).exists() for name in (MARKER, POINTER, META_FILE))


def check_not_in_index(given: str | os.PathLike[str] | None, *, may_be_index: bool = False) -> None:
    """An `InputError` when the output `given` resolves (symlinks followed) to a path inside an
    existing index folder, or to one itself unless `may_be_index` (the index command's own --out).

    An index deletes what is inside it (old versions, the flat layout's files): a model, an
    embedding or a report written there would be lost on the next append, and anything that
    recorded it (an index recording an adapted model) left broken.
    """
    output = resolved(given)
    if output is None:
        return
    folders = [output.parent, *output.parent.parents] if may_be_index else [output, *output.parents]
    for folder in folders:
        if is_index_folder(folder):
            where = "an index folder" if folder == output else f"the index folder {folder}"
            raise InputError(
                f"the output {given} is {'' if folder == output else 'inside '}{where}: "
                "an index deletes what lives in it; choose a path outside it"
            )


def check_new_target(out: Path, overwrite: bool) -> None:
    """A new index goes to an absent or empty folder, or replaces an index with `overwrite`."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file; give a folder for the index")
    if not out.is_dir() or holds_no_version(out):
        return
    if not is_index_folder(out):
        raise InputError(f"--out {out} is a folder that is neither empty nor an index; choose another")
    if not overwrite:
        raise InputError(
            f"{out} already holds an index: use --append to add to it, or --overwrite to replace it"
        )
