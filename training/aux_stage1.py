"""Stage 1 of InfoCSE: train the auxiliary network's extra layers and MLM head with MLM alone.

InfoCSE joins a *pre-trained* auxiliary network to contrastive training (its head comes from
Condenser, Gao & Callan 2021), so that the tiny MLM weight (1e-5) meets a network that already
reconstructs sentences. all-MiniLM-L6-v2 has no such head, so `embedkit train` makes one first:
the encoder stays at the base weights (no gradient, its training dropout on, as in stage 2), the
frozen lower layers extract the masked sentence's features, and only the extra layers and the head
learn, for `aux_stage1_steps` steps of AdamW (lr `aux_stage1_lr`, Condenser's 1e-4; 10% warm-up,
linear decay; clip 1.0) on the training sentences plus `aux_stage1_corpus`.

The result depends only on the base model, those sentences and the stage-1 settings, so it is
cached under the user cache (`cache_dir()/infocse-stage1/<key>/`, written atomically, safetensors
and JSON): every run of an experiment grid with the same base and data reuses it. `--aux-from DIR`
(`aux_from`) loads a stage-1 folder instead. Stage 1 runs on its own RNG streams (seed
`STAGE1_SEED`), so the training run that follows draws exactly the random numbers it would draw
without it.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from embedkit.data.corpus import load_sentences, sentences_fingerprint
from embedkit.errors import InputError
from embedkit.storage.atomic import atomic_dir
from embedkit.storage.user_cache import cache_dir
from embedkit.training.config import TrainConfig

STAGE1_SEED = 0  # the stage-1 data order, masks and dropout: not the run's seed, so seeds share it
WEIGHTS = "aux.safetensors"
META = "stage1.json"
FORMAT = 1  # bump when the network or the stage-1 recipe changes: old cache entries stop matching


def cache_root() -> Path:
    return cache_dir() / "infocse-stage1"


def stage1_settings(config: TrainConfig, pooling: str, lower: int) -> dict[str, Any]:
    """Everything besides the base and the data that changes the stage-1 weights."""
    return {
        "format": FORMAT,
        "seed": STAGE1_SEED,
        "pooling": pooling,
        "aux_lower_layers": lower,
        "aux_layers": config.aux_layers,
        "aux_mask_rate": config.aux_mask_rate,
        "aux_stage1_steps": config.aux_stage1_steps,
        "aux_stage1_lr": config.aux_stage1_lr,
        "batch_size": config.batch_size,
        "max_seq_length": config.max_seq_length,
    }


def stage1_key(base_fingerprint: str, data_fingerprint: str, settings: dict[str, Any]) -> str:
    text = json.dumps({"base": base_fingerprint, "data": data_fingerprint, **settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def stage1_sentences(config: TrainConfig, sentences: list[str]) -> list[str] | None:
    """The stage-1 sentences (None when stage 1 is not trained); checks `aux_from` and
    `aux_stage1_corpus` before anything is written (`InputError`)."""
    if not config.uses_aux or config.aux_stage1_steps == 0:
        return None
    if config.aux_from is not None:
        folder = Path(config.aux_from).expanduser()
        if not (folder / WEIGHTS).is_file():
            raise InputError(f"--aux-from {folder} holds no {WEIGHTS}: give a stage-1 folder")
        return None
    extra: list[str] = []
    if config.aux_stage1_corpus is not None:
        extra = load_sentences(config.aux_stage1_corpus).sentences
    return list(dict.fromkeys([*sentences, *extra]))


def prepare_aux(
    model: Any,  # ContrastiveModel, at the base weights
    config: TrainConfig,
    sentences: list[str] | None,
    base_fingerprint: str,
    base_path: Path,
    device: torch.device,
    dtype: torch.dtype | None,
    note: Callable[[str], None],
) -> dict[str, Any]:
    """Load or train stage 1 into `model.aux`; return what the run's metadata records of it."""
    aux = model.aux
    if config.aux_from is not None:
        folder = Path(config.aux_from).expanduser()
        load_stage1(folder, aux)
        note(f"auxiliary MLM network from {folder}")
        return {"source": str(folder)}
    if sentences is None:  # aux_stage1_steps == 0: the copied layers and a fresh head, untrained
        return {"source": "untrained"}
    settings = stage1_settings(config, model.pooling, aux.lower)
    key = stage1_key(base_fingerprint, sentences_fingerprint(sentences), settings)
    folder = cache_root() / key
    if (folder / WEIGHTS).is_file():
        load_stage1(folder, aux)
        note(f"auxiliary MLM network: stage 1 reused from {folder}")
        return {"source": "cache", "key": key}
    note(
        f"auxiliary MLM network: stage 1, {config.aux_stage1_steps} MLM steps on {len(sentences):,} sentences"
    )
    started = time.perf_counter()
    losses = train_stage1(model, sentences, config, base_path, device, dtype)
    info = {
        "settings": settings,
        "base_fingerprint": base_fingerprint,
        "sentences": len(sentences),
        "data_fingerprint": sentences_fingerprint(sentences),
        "first_loss": losses[0],
        "last_loss": float(np.mean(losses[-10:])),
        "seconds": round(time.perf_counter() - started, 3),
    }
    save_stage1(folder, aux, info)
    first, last, seconds = info["first_loss"], info["last_loss"], info["seconds"]
    note(f"stage 1 done: MLM loss {first:.3f} -> {last:.3f} ({seconds:.0f} s)")
    return {"source": "trained", "key": key, "first_loss": info["first_loss"], "last_loss": info["last_loss"]}


def train_stage1(
    model: Any,
    sentences: list[str],
    config: TrainConfig,
    base_path: Path,
    device: torch.device,
    dtype: torch.dtype | None,
) -> list[float]:
    """MLM alone on the auxiliary network's trainable part; returns the loss of every step."""
    from embedkit.encode.batching import TokenBatcher
    from embedkit.encode.torch_head import pool
    from embedkit.training.batches import autocast, pad_batch, steps_per_epoch
    from embedkit.training.optimizer import make_scheduler

    aux, backbone = model.aux, model.backbone
    batcher = TokenBatcher(base_path, config.max_seq_length)
    encodings = batcher.tokenizer.encode_batch(sentences)
    per_epoch = steps_per_epoch(len(sentences), config.batch_size)
    params = [p for p in aux.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.aux_stage1_lr, weight_decay=0.0)
    scheduler = make_scheduler(optimizer, config.aux_stage1_steps, 0.1)
    devices = [device.index or torch.cuda.current_device()] if device.type == "cuda" else []
    was_training, previous_generator = backbone.training, aux.generator
    losses: list[float] = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(STAGE1_SEED)
        aux.generator = torch.Generator(device=device).manual_seed(STAGE1_SEED)
        backbone.train()
        aux.train()
        try:
            for step in range(config.aux_stage1_steps):
                epoch, offset = divmod(step, per_epoch)
                order = np.random.default_rng([STAGE1_SEED, epoch]).permutation(len(sentences))
                rows = order[offset * config.batch_size : (offset + 1) * config.batch_size]
                inputs = model.model_inputs(pad_batch(encodings, rows, batcher.pad_id, device))
                with autocast(device, dtype):
                    with torch.no_grad():
                        hidden = backbone(**inputs).last_hidden_state
                        vectors = pool(hidden, inputs["attention_mask"], model.pooling)
                    loss = aux(vectors, inputs)
                if not math.isfinite(loss.item()):
                    raise InputError("the stage-1 MLM loss is no longer finite: lower aux_stage1_lr")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
        finally:
            aux.generator = previous_generator
            backbone.train(was_training)
    return losses


def save_stage1(folder: Path, aux: Any, info: dict[str, Any]) -> None:
    with atomic_dir(folder) as tmp:
        tensors = {k: v.detach().contiguous().cpu() for k, v in aux.trainable_state().items()}
        save_file(tensors, str(tmp / WEIGHTS))
        (tmp / META).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def load_stage1(folder: Path, aux: Any) -> None:
    """Load a stage-1 result into `aux`; `InputError` when it was made for another network shape."""
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except (OSError, ValueError, RuntimeError) as exc:  # safetensors raises several kinds
        raise InputError(f"cannot read the stage-1 weights in {folder}: {exc}") from None
    expected = {k: v.shape for k, v in aux.trainable_state().items()}
    found = {k: v.shape for k, v in tensors.items()}
    if expected != found:
        raise InputError(
            f"the stage-1 weights in {folder} do not fit this auxiliary network "
            "(another base model, aux_layers or hidden size?)"
        )
    aux.load_state_dict(tensors, strict=False)


__all__ = ["WEIGHTS", "cache_root", "prepare_aux", "stage1_key", "stage1_sentences", "train_stage1"]
