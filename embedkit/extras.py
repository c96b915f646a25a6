"""The optional extras of `pyproject.toml` and the one message for a missing one.

A feature that needs an extra calls `require_extra(extra, feature)` before importing it: the
modules are looked for without being imported (`importlib.util.find_spec`, so the check is
instant), and a missing one is an `InputError` (exit 2) that names the feature, what is
missing and the `pip install` line, rather than a `ModuleNotFoundError` traceback at the import.
"""

from __future__ import annotations

import importlib.util

from embedkit.errors import InputError

# extra -> the modules it installs that embedkit imports (pyproject.toml [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("starlette", "uvicorn", "orjson"),
    "plots": ("matplotlib",),
    "milvus": ("pymilvus",),
    "distributed": ("ray",),
    "cpu": ("faiss",),  # faiss: the cpu or gpu extra
    "documents": ("pypdf", "bs4", "lxml", "docx", "webencodings"),  # PDF, HTML, DOCX in a folder corpus
}
ALTERNATIVES = {"cpu": "'embedkit[cpu]' (or 'embedkit[gpu]')"}


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that are not installed."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken parent package, or a half-removed install
            found = False
        if not found:
            missing.append(module)
    return missing


def extra_available(extra: str) -> bool:
    return not missing_modules(extra)


def missing_extra_message(extra: str, feature: str, missing: list[str] | None = None) -> str:
    """`FEATURE needs the EXTRA extra (MODULES not installed): pip install 'embedkit[EXTRA]'`."""
    missing = missing if missing is not None else missing_modules(extra) or list(EXTRAS[extra])
    install = ALTERNATIVES.get(extra, f"'embedkit[{extra}]'")
    return f"{feature} needs the {extra} extra ({', '.join(missing)} not installed): pip install {install}"


def require_extra(extra: str, feature: str) -> None:
    """An `InputError` saying which extra to install, unless every module of `extra` is installed."""
    missing = missing_modules(extra)
    if missing:
        raise InputError(missing_extra_message(extra, feature, missing))


__all__ = ["EXTRAS", "extra_available", "missing_extra_message", "require_extra"]
