"""The training loop of `embedkit train`, to be read top to bottom.

`train` checks every input first (nothing is written for bad input), builds the model
(`model.ContrastiveModel`), evaluates the untrained base on the dev set, then runs the steps:
batch -> miCSE objective -> optimizer -> momentum update, logging to `OUT/metrics.jsonl`,
evaluating every `eval_steps` and checkpointing every `save_steps` (`checkpoint`). At the end
the best checkpoint (or the last weights, without a dev set) becomes the model folder (`save`),
which replaces `OUT` atomically, so the checkpoints disappear with the unfinished run.
With `overwrite` of a non-empty `OUT`, the run lives beside it (`ckpt.overwrite_run_dir`) until the
new model replaces `OUT`: a failed or killed run leaves the old folder as it was. One writer at a
time trains into `OUT` (`embedkit.storage.locking`).

Under torchrun (`distributed`) every rank runs this function: each embeds its slice of every global
batch through DistributedDataParallel, and rank 0 alone holds the lock, evaluates, logs, writes the
checkpoints and the model folder while the others wait at a barrier.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from embedkit.data.corpus import CorpusStats
from embedkit.encode.batching import TokenBatcher
from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError, RunFailure
from embedkit.storage.locking import write_lock
from embedkit.training import aux_stage1, distributed, step_speed
from embedkit.training import checkpoint as ckpt
from embedkit.training.batches import autocast, epoch_order, resolve_precision, steps_per_epoch
from embedkit.training.checkpoint_selection import InferenceEncoder, dev_evaluator, dev_label, dev_score
from embedkit.training.config import TrainConfig
from embedkit.training.display import TrainDisplay, format_terms
from embedkit.training.model import (
    ContrastiveModel,
    StepOutput,
    make_optimizer,
    make_scheduler,
    optimizer_step,
)
from embedkit.training.save import finish_run, keeps_base
from embedkit.training.token_table import TokenTable, position_limit
from embedkit.training.views import PairStats, load_examples

StepCallback = Callable[[int, dict[str, float]], None]


@dataclass(frozen=True)
class TrainResult:
    """What a finished run produced."""

    out_dir: Path
    method: str
    steps: int
    sentences: int
    corpus_stats: CorpusStats | PairStats
    dev_score: float | None  # best dev score of a trained checkpoint (the one saved)
    best_step: int | None
    base_dev_score: float | None  # dev score of the untrained base model
    final_losses: dict[str, float]  # the loss terms of the last step
    seconds: float
    dev_label: str | None = None  # what the dev scores are, e.g. "dev sts spearman_cosine"
    kept_base: bool = False  # --dev-retrieval: no checkpoint beat the base, so the base was saved

    @property
    def worse_than_base(self) -> bool:
        """True when the saved model scores below the untrained base on the dev set."""
        if self.dev_score is None or self.base_dev_score is None:
            return False
        return self.dev_score < self.base_dev_score


def train(
    corpus: str | Path | Sequence[str],
    out_dir: str | Path,
    config: TrainConfig | None = None,
    *,
    progress: bool = True,
    resume: bool = False,
    overwrite: bool = False,
    on_step: StepCallback | None = None,
) -> TrainResult:
    """Train a sentence encoder on `corpus` with `config.method` and write it to `out_dir`.

    `corpus` is a file or BEIR folder (see `embedkit.data.corpus`) or a list of sentences. With
    `resume`, a run killed at any point continues from its last checkpoint in `out_dir`;
    `overwrite` replaces a non-empty `out_dir` (a finished model there stays until the new one
    is complete). `on_step(step, losses)` is called after each step (and its checkpoint).
    Raises `InputError` for bad input, before anything is written, and `RunFailure` when the
    loss stops being finite (the last good checkpoint stays). The trained model may score below
    the untrained base on the dev set: check `worse_than_base` on the result.

    Started by torchrun with WORLD_SIZE > 1, every rank calls this (see `distributed`): `on_step`
    runs on every rank, and the dev scores of the result are rank 0's (None on the others).
    """
    config = (config or TrainConfig()).validate()
    context = distributed.setup(config.device, config.dist_timeout)
    options = {"progress": progress, "resume": resume, "overwrite": overwrite, "on_step": on_step}
    try:
        if not context.is_main:  # rank 0 holds the write lock for all of them
            return _train(corpus, out_dir, config, context, **options)
        with write_lock(out_dir):
            return _train(corpus, out_dir, config, context, **options)
    except Exception as exc:
        failure = distributed.lost_contact(exc, context)
        if failure is not None:
            raise failure from None
        raise
    finally:
        distributed.cleanup(context)


def _train(
    corpus: str | Path | Sequence[str],
    out_dir: str | Path,
    config: TrainConfig,
    context: distributed.Context,
    *,
    progress: bool,
    resume: bool,
    overwrite: bool,
    on_step: StepCallback | None,
) -> TrainResult:
    out = Path(out_dir).expanduser()
    main = context.is_main

    # 1. Check every input before anything is written (every rank checks, rank 0 writes).
    dev = dev_evaluator(config, corpus)
    # the dev pseudo queries' sentences are held out of training
    sample = load_examples(corpus, config, getattr(dev, "pseudo_set", None))
    if len(sample) < 2:
        raise InputError("contrastive training needs at least 2 distinct sentences")
    if config.batch_size % context.world_size:
        raise InputError(
            f"--batch-size {config.batch_size} does not divide by the {context.world_size} ranks: "
            "each rank takes an equal slice of every batch"
        )
    device = context.device
    dtype = resolve_precision(config.precision, device)
    step_speed.check_compile(config.compile, device)
    spec = read_model_spec(config.base_model)
    if spec.kind != "torch":
        raise InputError(f"--base {spec.path} is an ONNX folder: training needs the torch model")
    base_fingerprint = model_fingerprint(spec.path)
    resume_from = ckpt.prepare_out_dir(out, resume, overwrite)
    if resume_from is not None:
        ckpt.check_resumable(resume_from, config, sample.fingerprint, base_fingerprint)
    aux_sentences = aux_stage1.stage1_sentences(config, sample.anchors) if resume_from is None else None
    beside = overwrite and resume_from is None and _busy(out)
    distributed.barrier(context)  # every rank has looked at OUT before rank 0 changes it
    # A run that replaces a folder trains beside it: until the new model is complete, a failure or a
    # kill leaves the old folder exactly as it was (its metrics, no checkpoints added).
    run_dir = out if not beside else ckpt.overwrite_run_dir(out) if main else ckpt.overwrite_run_path(out)

    # 2. Model (the head's init is seeded), tokenized data, optimizer, schedule, RNGs.
    torch.manual_seed(config.seed)
    model = ContrastiveModel.from_folder(spec.path, config).to(device)
    positions = position_limit(model.backbone.config)
    tokens = TokenTable.from_model(spec.path, min(config.max_seq_length, positions), sample.anchors)
    # crop/ict positives are passages: their own truncation length (config.positive_max_length),
    # never longer than the base model has position embeddings for
    positive_length = min(config.positive_max_length, positions)
    positive_tokens = TokenTable.from_model(spec.path, positive_length, sample.positives or [])
    # The dev criterion embeds at the inference length, as a user of the saved folder will.
    dev_encoder = InferenceEncoder(model, TokenBatcher(spec.path, spec.max_seq_length), dtype, spec.path)
    per_epoch = steps_per_epoch(len(sample), config.batch_size, context.world_size)
    total = int(min(config.epochs * per_epoch, config.max_steps or math.inf))
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer, total, config.warmup_ratio)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    generator = torch.Generator(device=device).manual_seed(config.seed) if config.uses_ami else None
    if model.aux is not None:  # InfoCSE's masking RNG
        model.aux.generator = torch.Generator(device=device).manual_seed(config.seed)
    aux_generator = model.aux.generator if model.aux is not None else None
    parts = ckpt.TrainingParts(model, optimizer, scheduler, scaler, generator, aux_generator)
    meta = {
        "config": config.to_dict(),
        "data_fingerprint": sample.fingerprint,
        "base_fingerprint": base_fingerprint,
    }
    if context.rank > 0:  # its own dropout masks; rank 0 keeps the single-process stream
        torch.manual_seed(distributed.rank_seed(config.seed, context.rank))

    # 3. Resume from the last checkpoint, or start afresh with the base model's dev score.
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / ckpt.METRICS
    display = TrainDisplay(total, enabled=progress and main)
    ranks = f" x {context.world_size} ranks ({context.backend})" if context.distributed else ""
    display.note(f"{config.method}: {sample.stats.describe()}; {total} steps on {device.type}{ranks}")
    if config.ami_dropped:
        views = config.views
        display.note(f"note: AMI compares dropout views of the same tokens; --views {views} turns it off")
    world = {"world_size": context.world_size}
    if resume_from is not None:
        rank = context.rank if context.distributed else None
        state = ckpt.load_checkpoint(resume_from, parts, rank=rank, prune=main)
        if context.rank > 0 and not ckpt.has_rank_rng(resume_from, context.rank):
            torch.manual_seed(distributed.rank_seed(config.seed, context.rank, state.step))
        if main:
            ckpt.truncate_metrics(metrics, state.step)
            ckpt.append_metrics(metrics, {"event": "resume", "step": state.step, **world})
        display.note(f"resumed from step {state.step}")
    else:
        state = ckpt.TrainState()
    if resume_from is None and main:
        if overwrite:
            ckpt.remove_checkpoints(run_dir)
            metrics.unlink(missing_ok=True)
        # Stage 1 (or its cache) before the first step, on its own RNG streams; DDP then hands
        # rank 0's auxiliary weights to the other ranks.
        if model.aux is not None:
            meta["aux_stage1"] = aux_stage1.prepare_aux(
                model, config, aux_sentences, base_fingerprint, spec.path, device, dtype, display.note
            )
        start = {"event": "start", "step": 0, "steps": total, "sentences": len(sample), **world}
        ckpt.append_metrics(metrics, {**start, **meta})
        if dev is not None:
            state.base_score = dev_score(dev, dev_encoder)
            record = {"step": 0, f"dev_{dev.primary_metric}": state.base_score, "base": True}
            ckpt.append_metrics(metrics, record)
            display.note(f"base model: {dev_label(dev)} {state.base_score:.4f}")
    step_speed.compile_model(model, config.compile, device)
    network = distributed.data_parallel(model, context)
    fixed = step_speed.fixed_shapes(config, device)  # pad to max_seq_length: one shape for the run
    every = step_speed.log_every(config, device)

    # 4. The steps. The loss terms stay on the device between reads, since a read is a host sync.
    display.start(state.step)
    started = time.perf_counter() - state.seconds
    losses, speed, rate = step_speed.LossReader(), step_speed.Throughput(), 0.0
    order_of: tuple[int, np.ndarray] | None = None  # (epoch, its order): one shuffle an epoch
    try:
        while state.step < total:
            epoch, offset = divmod(state.step, per_epoch)
            if order_of is None or order_of[0] != epoch:
                order_of = (epoch, epoch_order(len(sample), config.seed, epoch))
            rows = order_of[1][offset * config.batch_size : (offset + 1) * config.batch_size]
            shard = distributed.BatchShard.split(len(rows), context)
            batch = _rank_batch(tokens, rows, shard, device, fixed)
            if sample.positives is not None:
                positive = _rank_batch(positive_tokens, rows, shard, device, fixed)
                batch = {"anchor": batch, "positive": positive}
            network.train()
            with autocast(device, dtype):
                result = StepOutput(**network(batch, generator, shard))
            step = state.step + 1
            losses.add(step, result.total, result.terms)
            speed.add(len(rows))
            log = step % every == 0 or step == total
            evaluate = dev is not None and (step % config.eval_steps == 0 or step == total)
            save = step % config.save_steps == 0 or step == total
            if log or evaluate or save:  # the losses come to the host: before a record, a score, a save
                state.last_losses, bad_step = losses.read()
                rate = speed.rate()
                if bad_step is not None:  # the whole batch's loss: every rank stops here
                    _stop_nonfinite(metrics, run_dir, bad_step, state.last_losses, main)
                display.rate(rate)
            lr = scheduler.get_last_lr()[0]
            optimizer_step(result.loss, model, optimizer, scheduler, scaler, config.max_grad_norm)
            model.after_step(result.keys)  # momentum EMA, then this step's keys enter the queue
            state.step = step
            state.seconds = time.perf_counter() - started
            terms = state.last_losses  # those of the last read step
            if main and log:
                queued = len(model.queue) if model.queue is not None else 0
                # seconds of training so far: differences between records are step times
                record = {"step": state.step, "epoch": epoch, "lr": lr, **terms, "queue": queued}
                record |= {"sentences_per_s": round(rate, 1), "seconds": round(state.seconds, 3)}
                ckpt.append_metrics(metrics, record)
            display.advance(state.step, terms)
            rank_rng = distributed.gather_rng_states(context) if save and context.distributed else None
            if main and evaluate:
                score = dev_score(dev, dev_encoder)
                improved = state.best_score is None or score > state.best_score
                if improved:
                    ckpt.save_best(run_dir, model, state.step, score)
                    state.best_score, state.best_step = score, state.step
                record = {"step": state.step, f"dev_{dev.primary_metric}": score, "best": improved}
                ckpt.append_metrics(metrics, record)
                best = " (best so far)" if improved else ""
                display.note(f"step {state.step}: {dev_label(dev)} {score:.4f}{best}")
            if main and save:
                ckpt.save_checkpoint(run_dir, parts, state, meta, rank_rng)
            if evaluate or save:
                distributed.barrier(context)  # the other ranks wait for rank 0's evaluation and files
                speed.rate()  # the next rate counts steps only, not this evaluation and checkpoint
            if on_step is not None:
                on_step(state.step, terms)
    finally:
        display.stop()

    # 5. The model folder, from the best dev checkpoint (else the last weights), replaces `out`.
    # On the user's own judged queries, a run that never beat the base gives the base back.
    kept_base = keeps_base(config, state)
    if main:
        finish_run(out, run_dir, model, config, meta, state, corpus, sample, spec, dev, display.note)
        if run_dir != out:
            shutil.rmtree(run_dir, ignore_errors=True)
    distributed.barrier(context)  # the other ranks return once the model folder is in place
    return TrainResult(
        out,
        config.method,
        state.step,
        len(sample),
        sample.stats,
        state.best_score,
        state.best_step,
        state.base_score,
        state.last_losses,
        state.seconds,
        dev_label(dev) if dev is not None else None,
        kept_base,
    )


def _rank_batch(
    tokens: TokenTable, rows: np.ndarray, shard: distributed.BatchShard, device: torch.device, fixed: bool
) -> dict[str, torch.Tensor]:
    """This rank's slice of the global batch `rows`, padded to the whole batch's longest sentence
    (so every rank has the single-process width), or to the table's width with `fixed` shapes."""
    width = tokens.width if fixed else tokens.longest(rows)
    return step_speed.to_device(tokens.batch(shard.take(rows), width), device)


def _stop_nonfinite(metrics: Path, run_dir: Path, step: int, terms: dict[str, float], main: bool) -> None:
    """Record the first step whose loss was not finite and stop with `RunFailure`."""
    if main:
        ckpt.append_metrics(metrics, {"event": "nonfinite", "step": step, **terms})
    last = ckpt.latest_checkpoint(run_dir)
    kept = f"the last good checkpoint is {last}" if last else "no checkpoint was written yet"
    raise RunFailure(
        f"the loss became {terms['loss']} at step {step} ({format_terms(terms)}); "
        f"training stopped, {kept}; try a lower learning rate"
    )


def _busy(out: Path) -> bool:
    return out.is_dir() and any(out.iterdir())
