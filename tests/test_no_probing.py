"""What crosses a seam is declared, never probed: no class forwards unknown attributes through
`__getattr__`, and no `getattr`/`hasattr` asks an encoder, a store, an index, an engine or a report
whether it has something, nor asks anything for a member of the encoder or store protocols.

An attribute an encoder may or may not have is declared in `embedkit/encode/protocol.py` and checked
with `isinstance` (`TokenizingEncoder`, `IdentifiedEncoder`); a wrapper names each attribute it hands
on (`embedkit/encode/wrapping.py`). The walk reads the source (`ast`), so a probe written any way
(`getattr(encoder, "x")`, `hasattr(self.store, "x")`) is found.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, Protocol

import pytest

from embedkit.encode import protocol
from embedkit.search.store import SearchStore

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("embedkit", "cli", "training", "export", "benchmarks")  # the code that ships or measures

# Objects of ours that a seam hands over: a probe of one by any of these names is a finding.
SEAM_NAMES = {"encoder", "store", "index", "engine", "report", "searcher", "batcher"}

# (file, what is probed): probes of another library's objects, each with the library's version in
# a comment beside it; a name in SEAM_NAMES can hold one of those too.
ALLOWED_PROBES = {
    ("embedkit/index/local_store.py", "index.code_size"),  # a faiss index: graph indexes have none
    ("embedkit/index/faiss_gpu.py", "index.pq"),  # a faiss index: only product-quantized ones have it
}

# (file, class or None for the module): `__getattr__` that is not an object forwarding to another.
ALLOWED_GETATTR = {
    ("embedkit/lazy.py", None),  # PEP 562 lazy exports of a package's public names
    ("cli/common.py", "GuardedStdout"),  # stands in for sys.stdout, which click and rich probe
}


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def _declared(cls: type) -> set[str]:
    """The public members a protocol (and the protocols it extends) declares."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (object, Protocol) or not getattr(klass, "_is_protocol", False):
            continue
        names.update(vars(klass), inspect.get_annotations(klass))
    return {name for name in names if not name.startswith("_")}


PROTOCOL_MEMBERS = set().union(
    *(
        _declared(cls)
        for cls in (
            protocol.Encodes,
            protocol.Encoder,
            protocol.TokenizingEncoder,
            protocol.IdentifiedEncoder,
            protocol.StagedEncoder,
            SearchStore,
        )
    )
)


def _probed_name(node: ast.expr) -> str | None:
    """`encoder` of `encoder` or of `self.encoder`: the name an object is reached by."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _probes(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, the object's name, the attribute named) of each `getattr`/`hasattr` call."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
        ):
            name = _probed_name(node.args[0]) or "?"
            attribute = node.args[1].value if isinstance(node.args[1], ast.Constant) else "?"
            found.append((node.lineno, name, str(attribute)))
    return found


def _getattr_definitions(tree: ast.Module) -> list[tuple[int, str | None]]:
    """(line, the class or None) of each `def __getattr__`."""
    found: list[tuple[int, str | None]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            found.append((node.lineno, None))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found.extend(
                (item.lineno, node.name)
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name == "__getattr__"
            )
    for node in ast.walk(tree):  # a module's lazy exports are made by a function (`lazy_exports`)
        if isinstance(node, ast.FunctionDef) and node.name != "__getattr__":
            found.extend(
                (inner.lineno, None)
                for inner in node.body
                if isinstance(inner, ast.FunctionDef) and inner.name == "__getattr__"
            )
    return found


def test_the_protocols_declare_what_the_walk_looks_for() -> None:
    """The walk's list is the protocols' own: a member added there is looked for here."""
    assert {"encode", "path", "fingerprint", "batcher", "identity", "stages"} <= PROTOCOL_MEMBERS
    assert {"documents_by_id", "search_dense", "compile_filter"} <= PROTOCOL_MEMBERS


def test_no_class_forwards_attributes_through_getattr() -> None:
    found = {
        (file, owner): line
        for file, tree in _sources()
        for line, owner in _getattr_definitions(tree)
    }
    assert {key: line for key, line in found.items() if key not in ALLOWED_GETATTR} == {}
    assert set(found) >= ALLOWED_GETATTR, "an allowed __getattr__ is gone: drop it from the list"


def test_no_object_of_a_seam_is_probed() -> None:
    found = {
        (file, f"{name}.{attribute}"): line
        for file, tree in _sources()
        for line, name, attribute in _probes(tree)
        if name in SEAM_NAMES or attribute in PROTOCOL_MEMBERS
    }
    assert {key: line for key, line in found.items() if key not in ALLOWED_PROBES} == {}
    assert set(found) >= ALLOWED_PROBES, "an allowed probe is gone: drop it from the list"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("getattr(encoder, 'batcher', None)", [(1, "encoder", "batcher")]),
        ("hasattr(self.store, 'close')", [(1, "store", "close")]),
        ("getattr(config, name)", [(1, "config", "?")]),
        ("encoder.batcher if isinstance(encoder, TokenizingEncoder) else None", []),
    ],
)
def test_the_walk_finds_a_probe_however_written(source: str, expected: list[Any]) -> None:
    assert _probes(ast.parse(source)) == expected


def test_the_walk_finds_a_forwarding_class() -> None:
    source = "class Wrapper:\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
    assert _getattr_definitions(ast.parse(source)) == [(2, "Wrapper")]
