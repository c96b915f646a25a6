"""Every command's --help reads as git's and ruff's do at 80 columns: nothing cut, no type jargon."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from embedkit.cli.app import app


def command_paths(command=None, prefix=()) -> list[tuple[str, ...]]:
    command = command or typer.main.get_command(app)
    paths = [prefix]
    if not hasattr(command, "list_commands"):
        return paths
    ctx = command.make_context("embedkit", [], resilient_parsing=True)  # commands load on first use
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if not sub.hidden:
            paths += command_paths(sub, (*prefix, name))
    return paths


PATHS = command_paths()


def render(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_is_covered():
    # the reference: the commands a user sees in `embedkit --help`, read from its text
    listed = re.findall(r"^  ([a-z-]+)  ", render(()).split("Commands:")[1], re.MULTILINE)
    assert {p[0] for p in PATHS if len(p) == 1} == set(listed) and len(listed) >= 12


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "embedkit")
def test_help_fits_80_columns_with_nothing_cut(path: tuple[str, ...]):
    text = render(path)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "…" not in text  # a value cut off by a too-narrow column
    commands = text.split("Commands:")[1] if "Commands:" in text else ""
    assert not [line for line in commands.splitlines() if line.rstrip().endswith("...")], commands
    # Python types as value names, typer's braces in the usage line
    assert not re.search(r"<(str|bool|int|float|path|text)[^>]*>", text), text
    usage = lines[0]
    assert usage.startswith("Usage: embedkit") and "{" not in usage, usage
    # a word broken at a line's end (textwrap splits hyphenated words unless told not to)
    assert not [line for line in lines if re.search(r"[A-Za-z]-$", line)], text


def test_index_help_describes_the_versioned_layout():
    text = " ".join(render(("index",)).split())
    assert "CURRENT" in text and "v-N/" in text and "tantivy" in text
    assert "The folder holds index.faiss" not in text and "embedkit-index.json (model" not in text


def test_options_name_their_values():
    text = render(("search",))
    assert "-k, --top-k N" in text and "--queries PATH" in text and "--model MODEL" in text
    assert "Usage: embedkit search [OPTIONS] INDEX_DIR [QUERY]" in text
