"""Hugging Face hub names (`org/name`) resolved to a local folder through the hub's cache.

As transformers does it: the snapshot in the cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
`~/.cache/huggingface/hub`) when it is there; downloaded into that cache otherwise, unless
`HF_HUB_OFFLINE=1`, in which case a name missing from the cache is one line saying how to get it.
The environment is read at each call, not when huggingface_hub was imported, so a command run
under a changed environment sees it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from embedkit.errors import InputError

# A hub repository id: one `/` between an owner and a name (letters, digits, `-`, `_`, `.`).
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
# Files a model folder never needs here: other frameworks' weights and other runtimes' exports.
_SKIPPED = ["*.h5", "*.msgpack", "*.ot", "tf_model*", "flax_model*", "onnx/*", "openvino/*", "*.onnx"]
_TRUE = {"1", "on", "yes", "true"}  # huggingface_hub's reading of a boolean variable


def looks_like_hub_name(text: str) -> bool:
    return bool(_REPO_ID.fullmatch(text)) and not text.startswith((".", "/"))


def hub_offline() -> bool:
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in names)


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "huggingface" / "hub"


def resolve_hub_name(repo_id: str) -> Path:
    """The cached (or, online, downloaded) snapshot folder of `repo_id`."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = hub_offline()
    try:
        folder = snapshot_download(
            repo_id, cache_dir=str(hub_cache()), local_files_only=offline, ignore_patterns=_SKIPPED
        )
    except LocalEntryNotFoundError:
        how = "HF_HUB_OFFLINE=1 forbids downloading" if offline else "it could not be downloaded"
        raise InputError(
            f"model {repo_id!r} is not in the Hugging Face cache {hub_cache()} and {how}: run "
            f"`hf download {repo_id}` where the hub can be reached, or pass a local model folder"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:160]
        raise InputError(f"cannot get model {repo_id!r} from the Hugging Face hub: {reason}") from None
    return Path(folder)


def hub_name_of(path: Path) -> str | None:
    """`org/name` when `path` is a snapshot folder of the hub's cache (`models--org--name/snapshots/REV`)."""
    parts = Path(path).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        owner_name = parts[-3][len("models--") :].split("--", 1)
        if len(owner_name) == 2:
            return "/".join(owner_name)
    return None
