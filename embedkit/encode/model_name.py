"""The name users see for a model (`/v1/models`, `/health`, `/info`, responses' `model` field).

A model is named, in this order: by `serve --served-model-name`; by its hub id when it is a
snapshot of the Hugging Face cache; by its model card (`README.md`: the front matter's
`model_name`, else its first `# ` heading when that is one word, as sentence-transformers' cards
have it); for an ONNX export, by the name of the torch folder it was exported from (`source` in
`embedkit.json`), so the bundled model's cached export is `all-MiniLM-L6-v2`, not its cache key,
and a trained model's export is named after the trained model; else by its folder's name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from embedkit.encode.hub import hub_name_of

_FRONT_MATTER_NAME = re.compile(r"^model_name:\s*[\"']?([^\"'\n]+?)[\"']?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^#\s+(\S+)\s*$", re.MULTILINE)


def card_name(folder: Path) -> str | None:
    try:
        card = (Path(folder) / "README.md").read_text(encoding="utf-8", errors="replace")[:20000]
    except OSError:
        return None
    if card.startswith("---"):
        end = card.find("\n---", 3)
        match = _FRONT_MATTER_NAME.search(card[: end if end > 0 else 0])
        if match:
            return match[1].strip()
    match = _HEADING.search(card)
    return match[1] if match else None


def export_source(folder: Path) -> Path | None:
    try:
        source = json.loads((Path(folder) / "embedkit.json").read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(source) if isinstance(source, str) and source else None


def model_name(folder: Path, served_name: str | None = None) -> str:
    """The name of the model in `folder` (see the module's docstring for the order)."""
    if served_name:
        return served_name
    folder = Path(folder)
    source = export_source(folder) if (folder / "model.onnx").exists() or any(folder.glob("*.onnx")) else None
    for candidate in (folder, source):
        if candidate is None:
            continue
        name = hub_name_of(candidate) or card_name(candidate)
        if name:
            return name
    return (source or folder).name if source is not None and source.name else folder.name
