"""A cold `embedkit search` loads what a search needs and nothing else.

Each command's module is imported when that command runs (`embedkit.cli.app.COMMANDS`), option
values of plain types are converted without pydantic (`embedkit.cli.plain_values`), and the
search path imports no torch, no training, export or server code. Checked on the modules a real
`embedkit search` process holds at its end (a subprocess), not on timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from embedkit.cli.app import COMMANDS, app, loaded_command

# Packages a search has no use for: the training and export stack, the server, the document
# converters, plotting, and pydantic (typer converts option values with it)
NOT_FOR_SEARCH = (
    "torch",
    "transformers",
    "sentence_transformers",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "matplotlib",
    "pypdf",
    "bs4",
    "docx",
    "markdown_it",
    "embedkit.training",
    "embedkit.export",
    "embedkit.serve",
    "embedkit.evaluation",
    "embedkit.jobs",
    "embedkit.data.converters",
)

RUN = """
import json, sys
from embedkit.cli.app import app
try:
    app(sys.argv[2:], prog_name="embedkit")
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def modules_after(tmp_path: Path, *args: str) -> list[str]:
    """The modules a fresh `embedkit ARGS...` process has imported when it ends (exit 0)."""
    report = tmp_path / "modules.json"
    run = subprocess.run(
        [sys.executable, "-c", RUN, str(report), *args], capture_output=True, text=True, timeout=300
    )
    result = json.loads(report.read_text())
    assert result["code"] in (0, None), run.stderr
    return result["modules"]


def loaded(modules: list[str], names: tuple[str, ...] | list[str]) -> list[str]:
    return sorted({n for n in names for m in modules if m == n or m.startswith(n + ".")})


@pytest.fixture(scope="module")
def onnx_index(tiny_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index built with an ONNX model, as the bundled model's index is (its ONNX export)."""
    from embedkit import IndexOptions, build_index

    folder = tmp_path_factory.mktemp("cold-search")
    corpus = folder / "corpus.jsonl"
    records = [{"_id": f"d{i}", "text": f"shock waves on a swept wing, case {i}"} for i in range(20)]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    options = IndexOptions(device="cpu", calibrate=False)
    return build_index(corpus, folder / "index", model=tiny_onnx, options=options).path


@pytest.mark.parametrize("mode", ["hybrid", "dense", "lexical"])
def test_a_search_imports_no_module_it_does_not_need(onnx_index: Path, tmp_path: Path, mode: str) -> None:
    modules = modules_after(tmp_path, "search", str(onnx_index), "shock waves", "--mode", mode, "-k", "3")
    assert "embedkit.cli.search" in modules and "faiss" in modules  # it did search
    assert loaded(modules, NOT_FOR_SEARCH) == []
    others = [f"embedkit.cli.{module}" for name, module in COMMANDS.items() if name != "search"]
    assert loaded(modules, others) == []


def test_the_command_list_imports_no_command(tmp_path: Path) -> None:
    modules = modules_after(tmp_path, "--help")
    assert loaded(modules, [f"embedkit.cli.{module}" for module in COMMANDS.values()]) == []
    assert loaded(modules, ("numpy", "torch", "pydantic", "faiss", "onnxruntime")) == []


def test_every_command_module_is_listed() -> None:
    """A command module left out of `COMMANDS` would be missing from the CLI."""
    folder = Path(__import__("embedkit.cli", fromlist=["x"]).__file__).parent
    registering = {p.stem for p in folder.glob("*.py") if "def register(app" in p.read_text(encoding="utf-8")}
    assert registering == set(COMMANDS.values())


# --- option values: the plain conversion against typer's own (pydantic) --------------------------

VALUES = [
    "5", "+5", "-3", "0", "007", "1e3", "1.0", ".5", "5.", "-0.0", "1e-3", "0.7", " 5", "5 ", "1_000",
    "\u0663", "0x10", "nan", "inf", "-inf", "", "abc", "99999999999999999999",
]  # fmt: skip


def converted(runtime: object, value: str, param: object, ctx: object) -> tuple[str, object]:
    from typer._click.exceptions import BadParameter

    try:
        result = runtime._coerce_value(value, param=param, ctx=ctx)  # type: ignore[attr-defined]
    except BadParameter as exc:
        return "error", exc.format_message()
    return type(result).__name__, result


@pytest.mark.parametrize("option", ["top_k", "alpha", "model", "queries_file"])
@pytest.mark.parametrize("value", VALUES)
def test_plain_values_convert_as_typer_does(option: str, value: str) -> None:
    from typer._coercion import build_runtime_param

    from embedkit.cli.plain_values import PlainRuntimeParam

    command = loaded_command("search")
    param = next(p for p in command.params if p.name == option or (option == "top_k" and p.name == "k"))
    ctx = command.make_context("search", ["index"], resilient_parsing=True)
    reference = converted(build_runtime_param(param.type_descriptor), value, param, ctx)
    assert converted(PlainRuntimeParam(param.type_descriptor), value, param, ctx) == reference


def test_the_app_converts_with_the_plain_values() -> None:
    command = typer.main.get_command(app)
    ctx = command.make_context("embedkit", ["search"], resilient_parsing=True)
    search = command.get_command(ctx, "search")
    from embedkit.cli.plain_values import PlainRuntimeParam

    k = next(p for p in search.params if p.name == "k")
    assert isinstance(k._runtime_param, PlainRuntimeParam)
