"""What `embedkit adapt` tells its user: the before/after table, and what a resumed run can skip.

No torch here: the CLI reads a finished `--out` before deciding whether to load anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import read_json
from embedkit.errors import InputError
from embedkit.index.folder import read_index_meta

if TYPE_CHECKING:
    from embedkit.training.adapt.run import AdaptResult


def before_after_table(result: AdaptResult) -> str:
    """The dev scores of the base and of the saved model, one row per score, the chosen one marked."""
    rows = [("", "base", "adapted", "delta")]
    for label, base in result.base_scores.items():
        adapted = result.adapted_scores[label]
        chosen = " (selects)" if label == result.dev_label else ""
        rows.append(
            (label + chosen, f"{100 * base:.2f}", f"{100 * adapted:.2f}", f"{100 * (adapted - base):+.2f}")
        )
    width = max(len(r[0]) for r in rows)
    lines = [f"{r[0]:<{width}}  {r[1]:>7}  {r[2]:>7}  {r[3]:>7}" for r in rows]
    rule = f"a step is kept when {result.dev_label} gains at least {100 * result.margin:.2f} over the base"
    if result.forced:
        rule = f"--force: the step best on {result.dev_label} is kept"
    kept = (
        "no step cleared the margin: the base model was saved"
        if result.kept_base
        else f"the model of step {result.best_step} of {result.steps} was saved"
    )
    resumed = f", resumed from step {result.resumed_from}" if result.resumed_from is not None else ""
    return "\n".join([*lines, rule, f"saved {result.out_dir}: {kept}{resumed}"])


def finished_adapt(out: Path, index: Path) -> bool:
    """Whether `out` holds a finished adapted model of `index`'s documents (a run killed after it)."""
    info_path = out / "embedkit.json"
    if not info_path.is_file() or (out / "checkpoints").exists():
        return False
    made_from = (read_json(info_path).get("adapt") or {}).get("made_from") or {}
    recorded = (made_from.get("index") or {}).get("corpus_fingerprint")
    return recorded is not None and recorded == read_index_meta(index).get("corpus_fingerprint")


def kept_base(out: Path) -> bool:
    """Whether the adapted model in `out` is its base unchanged (no step cleared the margin)."""
    info_path = out / "embedkit.json"
    if not info_path.is_file():
        return False
    dev = (read_json(info_path).get("adapt") or {}).get("dev") or {}
    return "best_step" in dev and dev["best_step"] is None


def holds_model(folder: Path, model: Path) -> bool:
    """Whether `folder` (an ONNX export, or an index's meta) already holds `model`'s weights."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    if (folder / "embedkit.json").is_file():
        return model_fingerprint(folder) == model_fingerprint(model)
    try:
        return read_index_meta(folder).get("model_fingerprint") == model_fingerprint(model)
    except InputError:  # not an index: the step is not done
        return False


__all__ = ["before_after_table", "finished_adapt", "holds_model", "kept_base"]
