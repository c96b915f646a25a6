"""The code a search and a build pass, traced as they run (`tests/flow_trace.py`, docs/code-layout.md).

A query on an index folder, from the pipeline's entry to its hits with their documents, passes at
most `MAX_SEARCH_MODULES` modules and never returns to a module it left (no lower layer calls back
up); `embedkit index` (the build, its calibration included) never returns either. Each case runs
the real command in a fresh interpreter, so threads and lazy imports are as a user's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embedkit import build_index
from embedkit.jobs.index_options import IndexOptions

HERE = Path(__file__).resolve().parent
# 9 since each hit's snippet is its best window (`search.snippets`), read as plain text by data's
# one Markdown reader (`data.plain_text`); the documents' own module is no longer entered
MAX_SEARCH_MODULES = 9
WORDS = [
    "shock",
    "wave",
    "wing",
    "flow",
    "boundary",
    "layer",
    "heat",
    "transfer",
    "buckling",
    "shell",
    "jet",
    "noise",
    "stall",
]


def traced(start: str, *args: str) -> dict:
    """`embedkit ARGS` under the tracer, from the first call of `start` until it returns."""
    command = [sys.executable, str(HERE / "flow_trace.py"), start, *args]
    found = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(found.stdout.strip().splitlines()[-1])
    assert result["exit_code"] == 0, found.stderr[-2000:]
    return result


def _corpus(path: Path, n: int = 40) -> Path:
    records = [
        {
            "_id": f"d{i}",
            "title": f"{WORDS[i % len(WORDS)]} note",
            "text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 40)) + ".",
            "year": 2000 + i % 10,
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("flow")
    corpus = _corpus(folder / "corpus.jsonl")
    build_index(corpus, folder / "whole", tiny_bert, IndexOptions(kind="flat", device="cpu"))
    build_index(corpus, folder / "passages", tiny_bert, IndexOptions(device="cpu", passages="8:2"))
    return {"whole": folder / "whole", "passages": folder / "passages", "corpus": corpus}


def test_a_query_passes_at_most_nine_modules_and_never_returns(indexes) -> None:
    flow = traced("embedkit.search.pipeline:search", "search", str(indexes["whole"]), "shock wave", "--json")
    assert flow["returns"] == []
    assert len(flow["modules"]) <= MAX_SEARCH_MODULES, flow["modules"]
    assert flow["modules"][0] == "embedkit.search.pipeline"


@pytest.mark.parametrize(
    ("index", "options"),
    [
        ("whole", ["--mode", "dense"]),
        ("whole", ["--mode", "lexical"]),
        ("whole", ["--mode", "hybrid", "--fusion", "rrf", "--where", "year >= 2005"]),
        ("passages", ["--mode", "hybrid", "--fusion", "prf", "--passages"]),
    ],
)
def test_every_mode_filter_and_passages_never_return(indexes, index: str, options: list[str]) -> None:
    flow = traced(
        "embedkit.search.pipeline:search", "search", str(indexes[index]), "wing flow", "--json", *options
    )
    assert flow["returns"] == [], flow["returns"][:3]


def test_a_build_and_an_upsert_never_return(indexes, tmp_path: Path) -> None:
    out = str(tmp_path / "built")
    build = traced("embedkit.jobs.index_build:build_index", "index", str(indexes["corpus"]), "--out", out)
    assert build["returns"] == [], build["returns"][:3]
    assert "embedkit.evaluation.fusion_calibration" in build["modules"]  # the calibration was traced
    upsert = traced(
        "embedkit.jobs.index_build:build_index",
        "index", str(indexes["corpus"]), "--out", out, "--append", "--upsert",
    )  # fmt: skip
    assert upsert["returns"] == [], upsert["returns"][:3]


def test_the_tracer_sees_a_call_back_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that hands a callback down and is called back from below is a return."""
    sys.path.insert(0, str(HERE))
    from flow_trace import Flow

    package = tmp_path / "embedkit_flowcase"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "top.py").write_text(
        "from embedkit_flowcase import low\n"
        "def run():\n    return low.each(helper)\n"
        "def helper(x):\n    return x + 1\n"
    )
    (package / "low.py").write_text("def each(f):\n    return [f(i) for i in range(2)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from embedkit_flowcase import top

    flow = Flow("embedkit_flowcase.top:run")
    sys.setprofile(flow.profile)
    try:
        top.run()
    finally:
        sys.setprofile(None)
    assert flow.modules == ["embedkit_flowcase.top", "embedkit_flowcase.low"]
    assert [(r["from"], r["into"]) for r in flow.returns] == [
        ("embedkit_flowcase.low", "embedkit_flowcase.top")
    ] * 2
