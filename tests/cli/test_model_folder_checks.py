"""Damaged model folders are refused when read: one `error:` line and exit 2, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embedkit.encode.loading import load_encoder
from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError

runner = CliRunner()


def exit2(args: list[str], message: str) -> None:
    from embedkit.cli.app import app

    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("wing flow\nshock waves\n")
    return path


def test_a_truncated_tokenizer_is_refused_on_load(tmp_path, tiny_bert, corpus):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    tokenizer = model / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:5000])
    with pytest.raises(InputError, match=r"cannot read the tokenizer .*tokenizer.json \(EOF while parsing"):
        load_encoder(model, device="cpu")
    exit2(["embed", str(corpus), "--out", str(tmp_path / "v.npy"), "--model", str(model)],
          f"cannot read the tokenizer {tokenizer}")
    assert not (tmp_path / "v.npy").exists()


def test_max_seq_length_beyond_the_position_embeddings_is_refused(tmp_path, tiny_bert, corpus):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    positions = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": positions + 1}))
    message = f"max_seq_length {positions + 1} exceeds the model's {positions} position embeddings"
    with pytest.raises(InputError, match=message):
        read_model_spec(model)
    exit2(["embed", str(corpus), "--out", str(tmp_path / "v.npy"), "--model", str(model)], message)
    exit2(["export", str(model), "--out", str(tmp_path / "onnx")], message)
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": positions}))
    assert read_model_spec(model).max_seq_length == positions  # the limit itself is fine


def test_roberta_numbers_positions_from_two():
    from embedkit.encode.model_folder import _check_positions

    _check_positions(512, {"model_type": "roberta", "max_position_embeddings": 514}, Path("m"))
    with pytest.raises(InputError, match="exceeds the model's 512 position embeddings"):
        _check_positions(514, {"model_type": "roberta", "max_position_embeddings": 514}, Path("m"))
