"""An experiment folder's `experiment.json`: the settings every run of it shares, and their key.

Runs are resumed only into a folder whose settings match, so that a table never mixes runs of
different settings.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError
from embedkit.storage.atomic import write_json_atomic
from embedkit.training.config import TrainConfig

MANIFEST = "experiment.json"


def settings_key(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def check_manifest(out_dir: Path, settings: dict[str, Any]) -> str:
    """Write `experiment.json`, or check that the one there has the same settings; return their key.

    An experiment written before a training setting existed stays resumable while that setting
    holds its default (which is, by design, the behaviour from before it existed); its runs keep
    the key they were recorded under.
    """
    key = settings_key(settings)
    path = out_dir / MANIFEST
    if path.is_file():
        old = read_json(path)
        if old.get("key") == key:
            return key
        changed = changed_settings(old.get("settings", {}), settings)
        if changed or not isinstance(old.get("key"), str):
            raise InputError(
                f"{out_dir} holds an experiment with other settings (changed: {', '.join(changed) or '?'}): "
                "use another --out, or delete it to start over"
            )
        return old["key"]
    write_json_atomic(path, {"key": key, "settings": settings})
    return key


def changed_settings(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Top-level settings that differ; a training field absent from `previous` counts at its default."""
    defaults = TrainConfig().to_dict()
    changed = []
    for name in sorted(set(previous) | set(current)):
        before, now = previous.get(name), current.get(name)
        if name == "train" and isinstance(before, dict) and isinstance(now, dict):
            now = {k: v for k, v in now.items() if k in before or v != defaults.get(k)}
        if before != now:
            changed.append(name)
    return changed
