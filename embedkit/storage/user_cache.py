"""Where embedkit keeps what it derives once per machine and user: one folder, one rule.

`$EMBEDKIT_CACHE_DIR`, else `$XDG_CACHE_HOME/embedkit`, else `~/.cache/embedkit`. The bundled model's
ONNX form, InfoCSE's first stage and the file checksum cache live under it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "EMBEDKIT_CACHE_DIR"


def cache_dir() -> Path:
    """The user cache folder (it may not exist yet)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "embedkit"
