"""Loading an index folder consistently, and verifying every byte of its files.

`load_consistent` reads the live version; if that fails while a writer has switched versions in
the meantime (the version read was replaced, or its files deleted), it reads the new one, so a
reader racing an append gets the old or the new index and never a false "corrupt" error. A
failure on a version that is still live is real, and raised.

What a damaged index returns at search is refused by `embedkit.index.local_store.check_scores`.

`read_version`: one version's files read and checked against each other (the metadata's fields,
its count and dimension against `index.faiss`, the document store's rows against the vectors):
what every load does, and what `verify` does after hashing, so that `verify` passes exactly the
indexes that `search` opens.

`verify_index`: the full check of `embedkit verify`, every byte of every file against the
checksums recorded when the version was published (a load checks them at a bounded cost:
`embedkit.storage.checksums`), then `read_version`. Damage is an `IndexDamaged` (exit 1 from
`verify`); a folder that is not an index, or one too old for checksums, an `InputError` (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from embedkit.errors import InputError
from embedkit.storage.checksums import CHECKSUMS, read_checksums, verify_checksums

T = TypeVar("T")
_ATTEMPTS = 20


def load_consistent(path: Path, live: Callable[[Path], Path], read: Callable[[Path], T]) -> T:
    """`read(live(path))`, again on the new version when the one read was replaced meanwhile."""
    for _ in range(_ATTEMPTS):
        folder = live(path)
        try:
            return read(folder)
        except (InputError, OSError) as exc:
            try:
                now = live(path)
            except InputError:
                now = None
            if now is None or now == folder:
                if isinstance(exc, InputError):
                    raise
                raise InputError(f"cannot read the index {path}: {exc}") from None
    raise InputError(f"the index {path} kept changing while it was read: try again")


class IndexDamaged(InputError):
    """`verify` found damage in an index that does not show in its checksums (they were written,
    or recomputed, over files that contradict each other)."""


def read_version(folder: Path) -> tuple[dict[str, Any], Any, Any]:
    """(metadata, faiss index, open `DocStore`) of one version folder, checked against each other;
    an `InputError` naming what contradicts what."""
    from embedkit.index.docstore import DocStore
    from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, read_faiss, read_index_meta
    from embedkit.index.lexical import lexical_settings
    from embedkit.index.quantized import open_full_vectors, quantization

    # every file of the version, as written (cached: cheap after once), those it opens listed
    verify_checksums(folder, required=(META_FILE, INDEX_FILE, DOCS_FILE))
    meta = read_index_meta(folder)
    index = read_faiss(folder / INDEX_FILE, meta)
    store = DocStore.open(folder / DOCS_FILE, lexical=lexical_settings(meta.get("lexical")))
    try:
        # every vector is a document's, or a deleted document's that is masked (`embedkit.index.rows`)
        deletions = store.deletions
        held = store.count() + len(deletions.masked_rows()) if deletions.any() else store.next_row()
        if held != index.ntotal:
            raise InputError(
                f"{folder / DOCS_FILE} does not match {folder / INDEX_FILE} ({held:,} rows for "
                f"{index.ntotal:,} vectors): rebuild the index"
            )
        if quantization(meta["params"]):  # the float vectors a quantized index rescores with
            open_full_vectors(folder, int(meta["dim"]), store.next_row())
    except BaseException:
        store.close()
        raise
    return meta, index, store


@dataclass(frozen=True)
class Verified:
    """What `verify_index` read: the version folder, its files and their bytes."""

    folder: Path
    files: int
    bytes: int


def verify_index(path: str | Path) -> Verified:
    """Hash every byte of every file the live version's `checksums.json` lists (`embedkit verify`).

    A damaged file is a `ChecksumMismatch`; a folder that is not an index, or one written before
    checksums were recorded, an `InputError`.
    """
    from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, index_files_dir, is_index_folder
    from embedkit.storage.checksums import ChecksumMismatch
    from embedkit.storage.versioned import damaged_pointer, owns, pointer_repair

    path = Path(path)
    problem = damaged_pointer(path) if path.is_dir() and owns(path) else None
    if problem is not None:  # the live version cannot be told: the repair is the user's choice
        raise ChecksumMismatch(f"{problem}: the index is damaged; {pointer_repair(path)}")
    if not path.is_dir() or not is_index_folder(path):
        raise InputError(f"not an embedkit index: {path}")

    def read(folder: Path) -> Verified:
        recorded = read_checksums(folder)
        if recorded is None:
            raise InputError(
                f"{folder} has no {CHECKSUMS} (written before embedkit recorded checksums): nothing to "
                "verify against; rebuild the index to protect it"
            )
        hashed = verify_checksums(folder, full=True, required=(META_FILE, INDEX_FILE, DOCS_FILE))
        try:  # the files as written: now what a load checks of them against each other
            store = read_version(folder)[2]
        except ChecksumMismatch:
            raise
        except InputError as exc:
            raise IndexDamaged(f"{exc}".splitlines()[0]) from None
        store.close()
        return Verified(folder, len(recorded), hashed)

    return load_consistent(path, index_files_dir, read)
