"""Hub names (`ORG/NAME`) found in a Hugging Face cache laid out by hand, and the names users see."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embedkit import load_encoder
from embedkit.cli.app import app
from embedkit.encode.model_folder import default_base_model_path, resolve_model_path
from embedkit.encode.model_name import model_name

REVISION = "0123456789abcdef0123456789abcdef01234567"


def lay_out_cache(cache: Path, repo_id: str, model: Path) -> Path:
    """The hub cache's layout, as huggingface_hub writes it: refs/main names a snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    shutil.copytree(model, snapshot)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    snapshot = lay_out_cache(cache, "acme/tiny-encoder", tiny_bert)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


def test_a_hub_name_opens_its_cached_snapshot(hub_cache: Path, tiny_bert: Path, sentences):
    assert resolve_model_path("acme/tiny-encoder") == hub_cache
    by_name = load_encoder("acme/tiny-encoder", device="cpu").encode(sentences)
    by_folder = load_encoder(tiny_bert, device="cpu").encode(sentences)
    np.testing.assert_allclose(by_name, by_folder, atol=1e-6)


def test_the_cli_takes_a_hub_name(hub_cache: Path, tiny_bert: Path, tmp_path: Path):
    sts = tmp_path / "sts.tsv"
    rows = ["a wing in the air flow\tthe wing and the flow\t4.0", "a cat eats\tthe engine load\t0.5",
            "a dog runs\ta dog is playing\t3.0"]
    sts.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    runner = CliRunner()
    by_name = runner.invoke(app, ["eval", "sts", str(sts), "--model", "acme/tiny-encoder", "--device", "cpu"])
    by_folder = runner.invoke(app, ["eval", "sts", str(sts), "--model", str(tiny_bert), "--device", "cpu"])
    assert by_name.exit_code == 0, by_name.output
    assert by_folder.exit_code == 0, by_folder.output
    score = [line for line in by_folder.stdout.splitlines() if "spearman" in line.lower()]
    assert score and score[0] in by_name.stdout


def test_a_name_missing_offline_is_one_line_saying_how_to_get_it(hub_cache: Path, tmp_path: Path):
    sts = tmp_path / "sts.tsv"
    sts.write_text("sentence1\tsentence2\tscore\na\tb\t1.0\nc\td\t2.0\n")
    args = ["eval", "sts", str(sts), "--model", "acme/not-cached", "--device", "cpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "acme/not-cached" in line and "hf download acme/not-cached" in line and "HF_HUB_OFFLINE" in line


@pytest.mark.parametrize("text", ["missing-folder", "./acme/x", "a/b/c"])
def test_what_is_not_a_hub_name_is_still_a_missing_folder(text: str, hub_cache: Path):
    from embedkit.errors import InputError

    with pytest.raises(InputError, match="model folder not found"):
        resolve_model_path(text)


def test_names_users_see(hub_cache: Path, tiny_bert: Path, tmp_path: Path):
    assert model_name(hub_cache) == "acme/tiny-encoder"
    assert model_name(default_base_model_path()) == "all-MiniLM-L6-v2"  # its card's heading
    assert model_name(tiny_bert) == tiny_bert.name  # no card: the folder's name
    assert model_name(tiny_bert, "served-as") == "served-as"
    export = tmp_path / "onnx"
    export.mkdir()
    (export / "model.onnx").write_bytes(b"")
    (export / "embedkit.json").write_text(f'{{"source": "{default_base_model_path()}"}}')
    assert model_name(export) == "all-MiniLM-L6-v2"  # an export: its source's name, not "onnx"
    (tmp_path / "carded").mkdir()
    (tmp_path / "carded" / "README.md").write_text("---\nmodel_name: legal-encoder\n---\n# Some title\n")
    assert model_name(tmp_path / "carded") == "legal-encoder"
