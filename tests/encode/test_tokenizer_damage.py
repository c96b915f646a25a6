"""A model folder whose tokenizer files are damaged: one line naming the folder, exit 2, no hang.

Each variant damages a copy of the tiny model (with or without its `tokenizer.json`) and runs
`embedkit embed` with it; the healthy copy is the control that must embed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_helpers import invoke_with_deadline

from embedkit.encode.batching import load_tokenizer
from embedkit.errors import InputError


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _zeroed(path: Path) -> None:
    path.write_bytes(b"\0" * max(path.stat().st_size, 1000))


def _no_unk(path: Path) -> None:
    path.write_text("[PAD]\n[CLS]\n[SEP]\nwing\nflow\n", encoding="utf-8")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


# (variant, the file damaged, keep tokenizer.json, how, words of the one line)
VARIANTS: list[tuple[str, str, bool, Callable[[Path], None], str]] = [
    ("empty vocab.txt", "vocab.txt", False, _empty, "cannot tokenize text"),
    ("zeroed vocab.txt", "vocab.txt", False, _zeroed, "cannot tokenize text"),
    ("vocab.txt without [UNK]", "vocab.txt", False, _no_unk, "cannot tokenize text"),
    ("vocab.txt a FIFO", "vocab.txt", False, _fifo, "is a pipe or FIFO"),
    ("vocab.txt a folder", "vocab.txt", False, _folder, "is a folder"),
    ("tokenizer.json a FIFO", "tokenizer.json", True, _fifo, "is a pipe or FIFO"),
    ("tokenizer.json empty", "tokenizer.json", True, _empty, "cannot read the tokenizer"),
    ("tokenizer_config.json a FIFO", "tokenizer_config.json", False, _fifo, "is a pipe or FIFO"),
]


def damaged_copy(tiny_bert: Path, folder: Path, name: str, keep_json: bool, how) -> Path:
    model = folder / "model"
    shutil.copytree(tiny_bert, model)
    if not keep_json:
        (model / "tokenizer.json").unlink()
    if how is not None:
        how(model / name)
    return model


@pytest.mark.parametrize(
    ("variant", "name", "keep_json", "how", "words"), VARIANTS, ids=[v[0] for v in VARIANTS]
)
def test_a_damaged_tokenizer_is_one_line_naming_the_folder(
    tmp_path, tiny_bert, variant, name, keep_json, how, words
):
    model = damaged_copy(tiny_bert, tmp_path, name, keep_json, how)
    with pytest.raises(InputError, match=words) as caught:
        load_tokenizer(model, 64)
    assert str(model) in str(caught.value)
    corpus = tmp_path / "c.txt"
    corpus.write_text("wing flow\nan unusual zqxjv word\n", encoding="utf-8")
    args = ["embed", str(corpus), "--out", str(tmp_path / "v.npy"), "--model", str(model)]
    code, stderr = invoke_with_deadline(args)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert str(model) in lines[0] and words in lines[0], lines[0]


@pytest.mark.parametrize("keep_json", [True, False])
def test_the_healthy_copy_tokenizes_as_before(tmp_path, tiny_bert, keep_json):
    """The control: the check refuses only damage (with and without tokenizer.json)."""
    model = damaged_copy(tiny_bert, tmp_path, "vocab.txt", keep_json, None)
    tokenizer = load_tokenizer(model, 64)
    reference = load_tokenizer(tiny_bert, 64)
    text = "wing flow an unusual zqxjv word"
    assert tokenizer.encode(text).ids == reference.encode(text).ids
