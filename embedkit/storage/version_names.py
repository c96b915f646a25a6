"""The names inside a versioned folder (`embedkit.storage.versioned`): its pointer, its marker, the
journal of a first build under way, its version folders `v-NNNNNN` and the staging folders of writes
under way.

Their own module, so that checksums (which every version folder carries) can tell a version folder
without importing the versioning that writes them.
"""

from __future__ import annotations

import re
from pathlib import Path

POINTER = "CURRENT"  # the file naming the live version
MARKER = ".embedkit-versions"  # written by every versioned write: the folder is embedkit's
# written before a folder's first version, removed once CURRENT names it: while it is there and CURRENT
# is not, the folder holds a first build that did not finish (killed), which nothing reads as an index
FIRST_BUILD = ".embedkit-first-build"
VERSION = re.compile(r"^v-(\d{6,})$")
STAGING = re.compile(r"^\.staging-")


def is_version_folder(folder: str | Path) -> bool:
    """Whether `folder` is a `v-N` of a versioned folder (its parent has the pointer or the marker)."""
    folder = Path(folder)
    parent = folder.parent
    return bool(VERSION.match(folder.name)) and ((parent / POINTER).exists() or (parent / MARKER).is_file())
