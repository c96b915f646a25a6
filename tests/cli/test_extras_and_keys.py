"""Optional extras that are missing, and API keys that no client can send: one line at start, exit 2.

The extras table hides each module of each extra in turn (as if it were not installed) and runs
the command that needs it: the one line must name the extra and the pip line, in the one format
`embedkit.extras` writes for every optional import. The keys table tries keys with characters
an HTTP header cannot carry the same way from every client.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from runtime_helpers import invoke_with_deadline
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.extras import EXTRAS
from embedkit.serve.settings import ServeConfig

MISSING = re.compile(
    r"^error: .+ needs the (?P<extra>\w+) extra \((?P<module>[\w\[\]]+) not installed\): "
    r"pip install 'embedkit\[(?P=extra)\]'"
)

# extra -> the command that needs it ({tmp} and {model} filled in)
COMMANDS = {
    "serve": ["serve", "{model}", "--port", "0"],
    "plots": ["eval", "retrieval", "{tmp}/beir", "--plot", "{tmp}/p.png", "--model", "{model}"],
    "milvus": ["search", "{tmp}/x.db", "wing"],
    "distributed": ["embed", "{tmp}/c.txt", "--out", "{tmp}/parts", "--ray", "--model", "{model}"],
    "cpu": ["index", "{tmp}/c.txt", "--out", "{tmp}/idx", "--model", "{model}"],
    "documents": ["index", "{tmp}/docs", "--out", "{tmp}/idx", "--model", "{model}"],
}


def test_every_extra_has_a_command_in_the_table():
    assert set(COMMANDS) == set(EXTRAS)


def _hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make `module` look uninstalled: not found by find_spec, and failing to import."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError


@pytest.mark.parametrize(
    ("extra", "module"), [(extra, module) for extra, modules in EXTRAS.items() for module in modules]
)
def test_a_missing_extra_is_one_line_naming_it(extra, module, tmp_path: Path, tiny_bert: Path, monkeypatch):
    (tmp_path / "c.txt").write_text("wing flow\nsun moon\n", encoding="utf-8")
    (tmp_path / "beir" / "qrels").mkdir(parents=True)
    (tmp_path / "beir" / "corpus.jsonl").write_text('{"_id": "d1", "text": "wing"}\n', encoding="utf-8")
    (tmp_path / "beir" / "queries.jsonl").write_text('{"_id": "q1", "text": "wing"}\n', encoding="utf-8")
    (tmp_path / "beir" / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("# Notes\n", encoding="utf-8")
    (tmp_path / "docs" / "report.pdf").write_bytes(b"%PDF-1.4\n")  # never read: the extra is checked first
    args = [a.replace("{tmp}", str(tmp_path)).replace("{model}", str(tiny_bert)) for a in COMMANDS[extra]]
    _hide(monkeypatch, module)
    result = CliRunner().invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    match = MISSING.match(lines[0])
    assert match and match["extra"] == extra and module in match["module"], lines[0]


@pytest.mark.parametrize("key", ["clé", "ключ", "key\u00a0nbsp", "tab\tkey", "emoji-\U0001f511", "new\nline"])
def test_an_api_key_a_client_cannot_send_is_refused_at_start(key: str, tiny_bert: Path) -> None:
    with pytest.raises(InputError, match="must be printable ASCII"):
        ServeConfig(api_key=key).check()
    # with a deadline: a key that passed would start a server that never returns
    code, stderr = invoke_with_deadline(["serve", str(tiny_bert), "--port", "0", "--api-key", key], 60)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "must be printable ASCII" in lines[0], stderr


@pytest.mark.parametrize("key", ["sk-abc123", "A~!@#$%^&*()_+{}|:<>?", "with inner space"])
def test_printable_ascii_keys_are_accepted(key: str) -> None:
    ServeConfig(api_key=key).check()
    # every character fits one byte of Latin-1, which is how the server reads a header
    assert key.encode("latin-1").decode("ascii") == key
