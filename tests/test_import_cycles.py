"""No two modules import each other, directly or around a circle, and no two packages either,
except the few named below with their reasons.

Every import counts: at module level, inside a function (a lazy import hides a circle, it does not
remove it) and for type checking only (an annotation names a dependency as much as a call does).
The reference is Tarjan's strongly connected components over the modules' `import` statements
read with `ast`; a package's imports are its modules'.
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
ALLOWED: set[frozenset[str]] = set()
# Package edges kept on purpose: the runtime exports the bundled model to ONNX on its first use
# (`embedkit.encode.default_onnx`), and the exporter is a package above the runtime it checks.
ALLOWED_PACKAGE_EDGES = {("embedkit.encode.default_onnx", "embedkit.export")}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for file in (ROOT / folder).rglob("*.py"):
            parts = [p for p in file.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = file
    return found


def imports(name: str, file: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(file.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
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


def package_of(module: str, known: dict[str, Path]) -> str:
    """`embedkit.index` for `embedkit.index.docstore`; a top-level module is its own package."""
    parts = module.split(".")
    for depth in range(len(parts), 1, -1):
        name = ".".join(parts[:depth])
        if name in known and known[name].name == "__init__.py" and name != "embedkit":
            return name
    return module


def package_graph(graph: dict[str, set[str]], known: dict[str, Path]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {package_of(name, known): set() for name in graph}
    for name, targets in graph.items():
        for target in targets:
            if (name, target) not in ALLOWED_PACKAGE_EDGES and package_of(target, known) != package_of(
                name, known
            ):
                packages[package_of(name, known)].add(package_of(target, known))
    return packages


def test_the_reference_counts_lazy_and_type_checking_imports(tmp_path):
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert imports("a", known["a"], known) == {"b"} and imports("b", known["b"], known) == {"a"}


def test_no_package_imports_a_package_that_imports_it():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    assert [sorted(c) for c in circles(package_graph(graph, known))] == []


def test_the_named_circles_are_gone():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    assert "embedkit.encode.model_folder" not in graph["embedkit.encode.st_modules"]
    assert "embedkit.remote.milvus" not in graph["embedkit.remote.base"]
    assert "embedkit.encode.identity" not in graph["embedkit.encode.model_folder"]
    assert "embedkit.storage.versioned" not in graph["embedkit.storage.checksums"]
    packages = package_graph(graph, known)
    assert "embedkit.evaluation" not in packages["embedkit.index"]
    assert "embedkit.index" not in packages["embedkit.storage"]
