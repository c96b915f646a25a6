"""Reading the JSON files of a model folder: one object per file, a damaged file one line.

Shared by `model_folder` (config, `embedkit.json`) and `st_modules` (`modules.json` and its
modules' configs), which otherwise would import each other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embedkit.errors import InputError


def read_json(path: Path) -> dict[str, Any]:
    from embedkit.data.input_files import read_input_text  # a FIFO here would hang a plain read

    try:
        data = json.loads(read_input_text(path))
    except ValueError as exc:  # not JSON, or an integer of over 4,300 digits Python will not convert
        raise InputError(f"cannot read {path}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise InputError(f"cannot read {path}: expected a JSON object")
    return data
