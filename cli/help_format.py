"""Help as git and ruff print theirs: click's plain layout, and a value name after each option.

Typer would name a value by its Python type (`<str>`, `<int range>`, `<path>`); embedkit names it
by what it is: `PATH`, `N` (a whole number), `NUMBER`, the choices, or the option's last word
(`--model MODEL`, `--device DEVICE`). Arguments show their name in capitals, in the usage line
too (`embedkit search [OPTIONS] INDEX_DIR [QUERY]`). Lines are not broken inside hyphenated words
(`ivf-` / `pq`), as textwrap would by default.

The `getattr` calls below read typer's and click's own objects, not embedkit's: `type_descriptor`
is typer's (0.29 and later; older ones have none and fall back to click's type name), `is_flag`
and `commands` are click 8.x's, on options and groups only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _annotation(param: Any) -> Any:
    """The option's Python type: typer's own descriptor where it has one, else click's type name."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        if getattr(descriptor, "is_choice", False):
            return tuple(descriptor.choices or ())
        return Path if descriptor.is_path else descriptor.annotation
    name = type(getattr(param, "type", None)).__name__  # click: Path, IntRange, Choice, ...
    return {"Path": Path, "IntParamType": int, "IntRange": int, "FloatParamType": float,
            "FloatRange": float}.get(name, str)


def value_name(param: Any) -> str:
    kind = _annotation(param)
    if isinstance(kind, tuple) and kind:
        return "|".join(str(c) for c in kind)
    if kind is Path:
        return "PATH"
    if kind is int:
        return "N"
    if kind is float:
        return "NUMBER"
    long = max(param.opts, key=len).lstrip("-")
    return long.split("-")[-1].upper()


def _usage_name(param: Any) -> Any:
    def usage() -> str:
        name = param.metavar if param.required else f"[{param.metavar}]"
        return name + ("..." if param.nargs != 1 else "")

    return usage


def _keep_hyphenated_words() -> None:
    try:
        from typer._click import _textwrap
    except ImportError:  # older typer: click itself
        from click import _textwrap

    class Wrapper(_textwrap.TextWrapper):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("break_on_hyphens", False)
            super().__init__(*args, **kwargs)

    if not getattr(_textwrap.TextWrapper, "keeps_hyphens", False):
        Wrapper.keeps_hyphens = True
        _textwrap.TextWrapper = Wrapper  # click's wrap_text imports it at each call


# One line per command in `embedkit --help` (click would cut the docstring's first sentence at the
# column's width, mid-word, with "...").
SUMMARIES = {
    "train": "Train a sentence encoder on your text (miCSE and friends)",
    "adapt": "Fit an index's model to its documents, without labels",
    "export": "Export a model to ONNX (fp32, fp16, int8), parity-checked",
    "embed": "Embed a corpus into a .npy file (or shards)",
    "index": "Build or extend a search index (vectors + BM25)",
    "delete": "Delete documents from an index",
    "compact": "Rebuild an index without its deleted documents",
    "calibrate": "Choose an index's hybrid fusion from its own documents",
    "push": "Send an index to a Milvus server or Milvus Lite file",
    "search": "Search an index: dense, BM25 or hybrid",
    "serve": "Serve a model (and an index) over HTTP",
    "experiment": "Compare methods, sizes and seeds in one table",
    "verify": "Check an index's files against their checksums",
    "clean": "Remove what killed runs left behind",
    "eval": "Evaluate a model: STS or retrieval",
    "sts": "Spearman correlation on STS pairs",
    "retrieval": "nDCG@10 and more on a BEIR folder or an index",
    "pseudo": "Label-free retrieval test built from a corpus",
    "sts-retrieval": "Recall@1/5/10 of finding an STS pair's partner",
}


def name_values(command: Any) -> None:
    """Give every option of `command` and its subcommands a value name (unless it has one)."""
    _keep_hyphenated_words()
    for param in command.params:
        if param.param_type_name == "argument":
            param.metavar = param.metavar or param.name.upper()
            param.display_type_rich = lambda ctx: None  # "CORPUS", not "CORPUS <path>"
            param._usage_display_name = _usage_name(param)  # "INDEX_DIR", not "{index_dir}"
        elif param.metavar is None and not getattr(param, "is_flag", False) and param.opts:
            param.metavar = value_name(param)
    for name, sub in getattr(command, "commands", {}).items():
        sub.short_help = sub.short_help or SUMMARIES.get(name)
        name_values(sub)
