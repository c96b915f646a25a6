"""No two modules import each other, directly or around a circle, except the few named below.

Every import counts, at module level or inside a function (a lazy import hides a circle, it does
not remove it); imports only for type checking do not. The reference is a plain depth-first search
over the modules' `import` statements read with `ast`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # the installed package -> its folder (pyproject's package-dir)
    "embedkit": "embedkit",
    "embedkit.training": "training",
    "embedkit.export": "export",
    "embedkit.cli": "cli",
}

# Circles kept on purpose, each with its reason; a new one fails the test.
ALLOWED = {
    # the runtime exports the bundled model to ONNX on its first use, and export reads model folders,
    # writes outputs and opens encoders through the runtime
    frozenset({"embedkit.encode.default_onnx", "embedkit.encode.loading", "embedkit.export",
               "embedkit.export.pipeline", "embedkit.index.folder", "embedkit.storage.outputs"}),
    # a ModelSpec offers its identity; the identity reads the spec's files
    frozenset({"embedkit.encode.identity", "embedkit.encode.model_folder"}),
    # checksums are recorded for version folders, which verify them on load
    frozenset({"embedkit.storage.checksums", "embedkit.storage.versioned"}),
}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for file in (ROOT / folder).rglob("*.py"):
            parts = [p for p in file.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = file
    return found


def imports(name: str, file: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    typing_only = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(branch.test)
                   for statement in branch.body for node in ast.walk(statement)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name and not name.startswith(t + "."))
    return found


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_reference_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_new_import_circles():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    found = set(circles(graph))
    assert found <= ALLOWED, [sorted(c) for c in found - ALLOWED]


def test_the_named_circles_are_gone():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    assert "embedkit.encode.model_folder" not in graph["embedkit.encode.st_modules"]
    assert "embedkit.remote.milvus" not in graph["embedkit.remote.base"]
