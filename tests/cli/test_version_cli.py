"""`embedkit --version`: embedkit's version and the libraries it runs on, the way pip-installed tools
report themselves."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata

import pytest
from typer.testing import CliRunner

import embedkit
from embedkit import versions
from embedkit.cli.app import app


def test_version_names_embedkit_and_every_installed_library() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"embedkit {metadata.version('embedkit')} from ")
    assert lines[0].endswith(f"(Python {platform.python_version()})")
    installed = {d.metadata["Name"].lower(): d.version for d in metadata.distributions()}
    for name in ("torch", "onnxruntime", "faiss-cpu", "tantivy"):  # the test environment's ([cpu,serve,test])
        if name in installed:
            assert any(line.split(" (")[0] == f"{name} {installed[name]}" for line in lines), lines


def test_version_lists_onnxruntime_providers_as_onnxruntime_reports_them() -> None:
    ort = pytest.importorskip("onnxruntime")
    (line,) = [line for line in versions.version_lines() if line.startswith("onnxruntime")]
    assert line.endswith(f"(providers: {', '.join(ort.get_available_providers())})")


def test_a_missing_library_is_named_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = metadata.version

    def without_faiss(name: str) -> str:
        if name.startswith("faiss"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", without_faiss)
    lines = versions.version_lines()
    assert "faiss: not installed" in lines
    assert not any(line.startswith("faiss-") for line in lines)


def test_version_imports_no_torch() -> None:
    code = (
        "import sys\nfrom embedkit.cli.app import main\nsys.argv = ['embedkit', '--version']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
        "print('torch' in sys.modules, 'faiss' in sys.modules, 'tantivy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "False False False"
    assert embedkit.__version__ in out
