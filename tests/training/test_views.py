"""Document views (crop, inverse cloze): what they cut, and how the model and trainer use them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.sentences import split_into_sentences
from embedkit.errors import InputError
from embedkit.training.batches import pad_batch
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel
from embedkit.training.trainer import train
from embedkit.training.views import CROP_RATIO, ICT_KEEP_RATE, sample_pairs

WORDS = "the boundary layer on a swept wing separates near the leading edge at high angles".split()  # noqa: SIM905


def _document(i: int) -> str:
    first = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(14))
    return f"Case {i} opens here. {first.capitalize()} in run {i}. The flow is measured at station {i} again."


DOCUMENTS = [_document(i) for i in range(40)]


def test_crop_spans_lie_inside_their_document_with_the_configured_ratio() -> None:
    docs = [" ".join(f"w{d}_{k}" for k in range(60)) for d in range(5)]  # every word unique
    pairs = sample_pairs(docs, "crop", limit=4000, seed=3)
    ratios = []
    for anchor, positive in zip(pairs.anchors, pairs.positives, strict=True):
        for span in (anchor, positive):
            words = span.split()
            doc = docs[int(words[0][1:].split("_")[0])]
            assert f" {span} " in f" {doc} "  # a contiguous span of the document
            ratios.append(len(words) / 60)
    ratios = np.array(ratios)
    low, high = CROP_RATIO
    assert ratios.min() >= low - 1 / 60 and ratios.max() <= high + 1 / 60
    assert abs(ratios.mean() - (low + high) / 2) < 0.01  # uniform over [10%, 50%]
    assert sample_pairs(docs, "crop", 4000, 3).anchors == pairs.anchors  # a function of the seed
    assert sample_pairs(docs, "crop", 4000, 4).anchors != pairs.anchors


def test_ict_anchors_are_sentences_left_out_of_the_positive_nine_times_in_ten() -> None:
    pairs = sample_pairs(DOCUMENTS, "ict", limit=4000, seed=0)
    kept = 0
    for anchor, positive in zip(pairs.anchors, pairs.positives, strict=True):
        (sentences,) = [s for s in map(split_into_sentences, DOCUMENTS) if anchor in s]  # one document
        rest = " ".join(s for s in sentences if s != anchor)
        assert positive in (rest, " ".join(sentences))
        kept += positive != rest
    assert pairs.stats.word_span_anchors == 0
    assert abs(kept / len(pairs) - ICT_KEEP_RATE) < 0.02
    assert sample_pairs(DOCUMENTS, "ict", 4000, 0).positives == pairs.positives


def test_unpunctuated_documents_give_word_span_anchors_and_sampling_terminates() -> None:
    docs = [" ".join(WORDS * 3).lower() for _ in range(3)]  # no sentence punctuation at all
    pairs = sample_pairs(docs, "ict", limit=50, seed=1)
    assert len(pairs) == 50 and pairs.stats.word_span_anchors == 50
    for anchor in pairs.anchors:
        assert 8 <= len(anchor.split()) <= 24 and anchor in docs[0]


def test_texts_too_short_to_cut_are_refused() -> None:
    with pytest.raises(InputError, match="--views crop needs documents of at least 20 words"):
        sample_pairs(["a short line", "another short line"], "crop", None, 0)
    with pytest.raises(InputError, match="--views ict needs documents of two sentences"):
        sample_pairs(["a short line"], "ict", None, 0)


def _pair_model(tiny_bert: Path, method: str) -> tuple[ContrastiveModel, dict]:
    config = TrainConfig(base_model=str(tiny_bert), method=method, views="ict", momentum_dropout=0.0)
    model = ContrastiveModel.from_folder(tiny_bert, config)
    model.eval()  # no dropout: the step is a deterministic function of the weights
    from embedkit.encode.batching import TokenBatcher

    batcher = TokenBatcher(tiny_bert, 32)
    anchors = batcher.tokenizer.encode_batch(["wing flow", "heat transfer rate"])
    positives = batcher.tokenizer.encode_batch(["the flow over the wing stalls", "heat moves in the layer"])
    rows = np.arange(2)
    batch = {
        "anchor": pad_batch(anchors, rows, batcher.pad_id, torch.device("cpu")),
        "positive": pad_batch(positives, rows, batcher.pad_id, torch.device("cpu")),
    }
    return model, batch


@pytest.mark.usefixtures("one_thread")
def test_a_two_document_batch_gives_the_hand_computed_info_nce(tiny_bert: Path) -> None:
    model, batch = _pair_model(tiny_bert, "simcse")
    with torch.no_grad():
        out = model.step(batch, None)
        e1 = model.head(model.sentence_vectors(batch["anchor"])).numpy().astype(np.float64)
        e2 = model.head(model.sentence_vectors(batch["positive"])).numpy().astype(np.float64)
    e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
    e2 /= np.linalg.norm(e2, axis=1, keepdims=True)
    logits = e1 @ e2.T / 0.05
    expected = np.mean([np.log(np.exp(row).sum()) - row[i] for i, row in enumerate(logits)])
    assert out.terms["info_nce"].item() == pytest.approx(expected, rel=1e-5)
    assert "ami" not in out.terms


@pytest.mark.usefixtures("one_thread")
def test_the_queue_receives_the_positive_views_keys(tiny_bert: Path) -> None:
    model, batch = _pair_model(tiny_bert, "micse")  # AMI is off with document views
    with torch.no_grad():
        out = model.step(batch, None)
        inputs = model.model_inputs(batch["positive"])
        from embedkit.encode.torch_head import pool

        hidden = model.momentum(**inputs)
        expected = model.head(pool(hidden, inputs["attention_mask"], model.pooling))
    assert torch.allclose(out.keys, expected, atol=1e-6)
    model.after_step(out.keys)
    assert torch.allclose(model.queue.keys()[-2:], expected, atol=1e-6)


@pytest.mark.usefixtures("one_thread")
def test_ict_training_runs_and_records_its_pairs(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": d}) + "\n" for i, d in enumerate(DOCUMENTS)))
    config = TrainConfig(
        base_model=str(tiny_bert), method="micse", views="ict", batch_size=8, max_steps=3,
        limit=64, device="cpu", positive_max_length=24,
    )  # fmt: skip
    result = train(corpus, tmp_path / "out", config, progress=False)
    assert result.steps == 3 and result.sentences == 64
    meta = json.loads((tmp_path / "out" / "embedkit.json").read_text())
    assert meta["data"]["stats"]["pairs"] == 64 and meta["training"]["config"]["views"] == "ict"
    losses = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert all("ami" not in r for r in losses) and any("info_nce" in r for r in losses)
    elapsed = [r["seconds"] for r in losses if "info_nce" in r]  # training time so far, per logged step
    assert len(elapsed) == 3 and 0 < elapsed[0] <= elapsed[1] <= elapsed[2]


@pytest.mark.usefixtures("one_thread")
def test_dev_retrieval_keeps_the_base_when_no_checkpoint_beats_it(tiny_bert: Path, tmp_path: Path) -> None:
    from eval_data import write_beir

    from embedkit.encode.torch_backend import TorchEncoder

    beir = write_beir(tmp_path / "beir")
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": d}) + "\n" for i, d in enumerate(DOCUMENTS)))
    config = TrainConfig(
        base_model=str(tiny_bert), method="simcse", views="crop", batch_size=8, max_steps=2,
        eval_steps=1, learning_rate=1e-12, device="cpu", dev_retrieval=str(beir),
    )  # fmt: skip
    result = train(corpus, tmp_path / "out", config, progress=False)
    assert result.kept_base  # a step of 1e-12 cannot beat the base
    texts = ["wing flow", "heat transfer"]
    saved = TorchEncoder(tmp_path / "out", device="cpu").encode(texts, normalize=True)
    base = TorchEncoder(tiny_bert, device="cpu").encode(texts, normalize=True)
    assert np.array_equal(saved, base)


def test_crop_on_a_sentence_per_line_file_exits_2(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = tmp_path / "lines.txt"
    corpus.write_text("a short line about wings\nanother short line\nheat moves\n")
    arguments = ["train", str(corpus), "--out", str(tmp_path / "out"), "--base", str(tiny_bert)]
    result = CliRunner().invoke(app, [*arguments, "--views", "crop"])
    assert result.exit_code == 2
    assert "--views crop needs documents of at least 20 words" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.usefixtures("one_thread")
def test_infocse_reconstructs_the_anchors_of_document_views(
    tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": d}) + "\n" for i, d in enumerate(DOCUMENTS)))
    config = TrainConfig(
        base_model=str(tiny_bert), method="infocse", views="ict", batch_size=8, max_steps=2,
        limit=32, device="cpu", positive_max_length=24, aux_stage1_steps=2, aux_mlm_weight=1.0,
    )  # fmt: skip
    train(corpus, tmp_path / "out", config, progress=False)
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("aux_mlm", 0) > 0 for r in records)


def test_passages_longer_than_the_positions_are_cut_at_the_limit(tiny_bert: Path, tmp_path: Path) -> None:
    """The tiny BERT has 64 position embeddings; the default 128-token positives must still train."""
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(tiny_bert).max_position_embeddings == 64
    long_documents = [" ".join([d] * 6) for d in DOCUMENTS[:16]]  # about 150 tokens each
    corpus = tmp_path / "long.jsonl"
    lines = (json.dumps({"_id": str(i), "text": d}) + "\n" for i, d in enumerate(long_documents))
    corpus.write_text("".join(lines))
    config = TrainConfig(
        base_model=str(tiny_bert), method="simcse", views="crop", batch_size=8, max_steps=1,
        max_seq_length=128, limit=16, device="cpu",
    )  # fmt: skip
    assert config.positive_max_length > 64
    assert train(corpus, tmp_path / "out", config, progress=False).steps == 1
