"""The steps of one `embedkit train` run: what `trainer.TrainJob` builds (`build_parts`) and the run
it hands to the loop (`TrainRun`): batch -> objective -> optimizer -> momentum update, logged to
`OUT/metrics.jsonl`, the dev evaluations, the checkpoints and, at the end, the model folder.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from embedkit.data.corpus import CorpusStats
from embedkit.encode.batching import TokenBatcher
from embedkit.encode.model_folder import ModelSpec
from embedkit.errors import RunFailure
from embedkit.evaluation.evaluator import Evaluator
from embedkit.training import checkpoint as ckpt
from embedkit.training import distributed, step_speed
from embedkit.training.batches import autocast, epoch_order, steps_per_epoch
from embedkit.training.checkpoint import BASE, BestWeights, Kept, TrainState
from embedkit.training.checkpoint_selection import InferenceEncoder, dev_label, dev_score
from embedkit.training.config import TrainConfig
from embedkit.training.display import TrainDisplay, format_terms
from embedkit.training.loop import DevScore, Due, Schedule
from embedkit.training.model import ContrastiveModel, StepOutput
from embedkit.training.optimizer import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.save import keeps_base, train_metadata, write_model_folder
from embedkit.training.token_table import TokenTable, position_limit
from embedkit.training.views import PairStats, TrainingExamples


class JobInputs(Protocol):
    """What the run reads of the job that built it (`trainer.TrainJob`)."""

    corpus: Any
    out: Path
    config: TrainConfig
    context: distributed.Context
    on_step: Callable[[int, dict[str, float]], None] | None

    @property
    def writes(self) -> bool: ...


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


@dataclass(frozen=True)
class Checked:
    """What `TrainJob.check` found: every input, checked, and where the run lives."""

    dev: Evaluator | None  # the dev criterion, or None
    sample: TrainingExamples  # the training examples (the dev pseudo queries' sentences held out)
    device: torch.device
    dtype: torch.dtype | None  # autocast's dtype, None for fp32
    spec: ModelSpec  # the base model
    meta: dict  # what the run is made from: the checkpoints record it, a resume compares it
    resume_from: Path | None  # the checkpoint to continue from
    aux_sentences: list[str] | None  # InfoCSE's stage-1 sentences (a fresh run)
    run_dir: Path  # where the checkpoints go: OUT, or beside it until the model replaces OUT

    @property
    def metrics(self) -> Path:
        return self.run_dir / ckpt.METRICS


@dataclass(frozen=True)
class RunParts:
    """What the steps are made of: the model, its token tables, optimizer and schedule, the RNGs."""

    model: ContrastiveModel
    tokens: TokenTable  # the anchors (or the sentences), at the training length
    positive_tokens: TokenTable  # crop/ict positives, at their own length (empty otherwise)
    dev_encoder: InferenceEncoder  # the dev criterion's view of the model, at the inference length
    per_epoch: int  # steps per epoch
    checkpoint: ckpt.Parts  # what a checkpoint holds: model, optimizer, schedule, scaler, RNGs, queue
    generator: torch.Generator | None  # AMI's sampler
    schedule: Schedule
    best: BestWeights
    fixed: bool  # pad to max_seq_length: one shape for the run
    every: int  # steps between loss reads


def build_parts(config: TrainConfig, context: distributed.Context, checked: Checked) -> RunParts:
    """The model (the head's init is seeded), tokenized data, optimizer, schedule, RNGs."""
    spec, device = checked.spec, checked.device
    torch.manual_seed(config.seed)
    model = ContrastiveModel.from_folder(spec.path, config).to(device)
    positions = position_limit(model.backbone.config)
    anchors, positives = checked.sample.anchors, checked.sample.positives or []
    tokens = TokenTable.from_model(spec.path, min(config.max_seq_length, positions), anchors)
    # crop/ict positives are passages: their own truncation length (config.positive_max_length),
    # never longer than the base model has position embeddings for
    positive_tokens = TokenTable.from_model(spec.path, min(config.positive_max_length, positions), positives)
    # The dev criterion embeds at the inference length, as a user of the saved folder will.
    dev_encoder = InferenceEncoder(
        model, TokenBatcher(spec.path, spec.max_seq_length), checked.dtype, spec.path
    )
    per_epoch = steps_per_epoch(len(checked.sample), config.batch_size, context.world_size)
    total = int(min(config.epochs * per_epoch, config.max_steps or math.inf))
    optimizer = make_optimizer(model, config)
    scheduler = make_scheduler(optimizer, total, config.warmup_ratio)
    scaler = torch.amp.GradScaler(device.type) if checked.dtype == torch.float16 else None
    generator = torch.Generator(device=device).manual_seed(config.seed) if config.uses_ami else None
    if model.aux is not None:  # InfoCSE's masking RNG, and the host one of its dropout seeds
        model.aux.generator = torch.Generator(device=device).manual_seed(config.seed)
        model.aux.host_seeds.manual_seed(config.seed)
    generators = {
        "ami_sampler": generator,
        "aux_masking": model.aux.generator if model.aux is not None else None,
        "aux_dropout_seeds": model.aux.host_seeds if model.aux is not None else None,
    }
    parts = ckpt.Parts(model, optimizer, scheduler, scaler, generators, ckpt.QueueFile(model))
    if context.rank > 0:  # its own dropout masks; rank 0 keeps the single-process stream
        torch.manual_seed(distributed.rank_seed(config.seed, context.rank))
    eval_steps = config.eval_steps if checked.dev is not None else None
    schedule = Schedule(total, eval_steps, config.save_steps)
    best = BestWeights(checked.run_dir, model.backbone, "backbone.safetensors", spec.path)
    fixed = step_speed.fixed_shapes(config, device)
    every = step_speed.log_every(config, device)
    return RunParts(
        model, tokens, positive_tokens, dev_encoder, per_epoch, parts, generator, schedule, best, fixed, every
    )


@dataclass
class Running:
    """What changes from step to step besides `TrainState`: the clock, the loss terms kept on the
    device between reads (a read is a host sync), the epoch's order, the RNGs a checkpoint gathers."""

    started: float = 0.0  # perf_counter at the first step, less the seconds of earlier sessions
    rate: float = 0.0  # sentences per second at the last read
    losses: step_speed.LossReader = field(default_factory=step_speed.LossReader)
    speed: step_speed.Throughput = field(default_factory=step_speed.Throughput)
    order: tuple[int, np.ndarray] | None = None  # (epoch, its order): one shuffle an epoch
    rank_rng: Any = None  # every rank's RNG states, gathered for a checkpoint


class TrainRun:
    """The loop's `Steps` of one `embedkit train` run, made by `TrainJob.build`, resumed or scored."""

    def __init__(
        self,
        job: JobInputs,
        checked: Checked,
        parts: RunParts,
        state: TrainState,
        network: torch.nn.Module,
        display: TrainDisplay,
    ) -> None:
        self.job, self.checked, self.parts, self.state = job, checked, parts, state
        self.network, self.display = network, display
        self.config, self.context, self.model = job.config, job.context, parts.model
        self.writes = job.writes
        self.schedule, self.best = parts.schedule, parts.best
        self.running = Running()

    def begin(self) -> int:
        return self.state.step

    @contextmanager
    def progress(self, done: int) -> Iterator[None]:
        """The progress bar; the loss terms stay on the device between reads (a read is a host sync)."""
        self.display.start(done)
        self.running.started = time.perf_counter() - self.state.seconds
        try:
            yield
        finally:
            self.display.stop()

    def step(self, step: int, due: Due) -> None:
        """Batch -> objective -> optimizer -> momentum update; the losses come to the host only
        when a record, a score or a checkpoint needs them."""
        state, config, model, running = self.state, self.config, self.model, self.running
        epoch, rows, shard, batch = self._batch(step)
        self.network.train()
        with autocast(self.checked.device, self.checked.dtype):
            result = StepOutput(**self.network(batch, self.parts.generator, shard))
        running.losses.add(step, result.total, result.terms)
        running.speed.add(len(rows))
        log = step % self.parts.every == 0 or step == self.schedule.total
        if log or due.evaluate or due.save:
            state.last_losses, bad_step = running.losses.read()
            running.rate = running.speed.rate()
            if bad_step is not None:  # the whole batch's loss: every rank stops here
                _stop_nonfinite(self.checked, bad_step, state.last_losses, self.writes)
            self.display.rate(running.rate)
        checkpoint = self.parts.checkpoint
        lr = checkpoint.scheduler.get_last_lr()[0]
        optimizer_step(
            result.loss,
            model,
            checkpoint.optimizer,
            checkpoint.scheduler,
            checkpoint.scaler,
            config.max_grad_norm,
        )
        model.after_step(result.keys)  # momentum EMA, then this step's keys enter the queue
        state.step = step
        state.seconds = time.perf_counter() - running.started
        terms = state.last_losses  # those of the last read step
        if self.writes and log:
            queued = len(model.queue) if model.queue is not None else 0
            # seconds of training so far: differences between records are step times
            record = {"step": step, "epoch": epoch, "lr": lr, **terms, "queue": queued}
            record |= {"sentences_per_s": round(running.rate, 1), "seconds": round(state.seconds, 3)}
            ckpt.append_metrics(self.checked.metrics, record)
        self.display.advance(step, terms)
        # every rank's RNG goes into the checkpoint: gathered on all ranks, before rank 0 evaluates
        gather = due.save and self.context.distributed
        running.rank_rng = distributed.gather_rng_states(self.context) if gather else None

    def _batch(self, step: int) -> tuple[int, np.ndarray, distributed.BatchShard, dict]:
        """The epoch, the global batch's rows, this rank's share, and its tensors."""
        parts, sample, running = self.parts, self.checked.sample, self.running
        epoch, offset = divmod(step - 1, parts.per_epoch)
        if running.order is None or running.order[0] != epoch:
            running.order = (epoch, epoch_order(len(sample), self.config.seed, epoch))
        size = self.config.batch_size
        rows = running.order[1][offset * size : (offset + 1) * size]
        shard = distributed.BatchShard.split(len(rows), self.context)
        device = self.checked.device
        batch = rank_batch(parts.tokens, rows, shard, device, parts.fixed)
        if sample.positives is not None:
            positive = rank_batch(parts.positive_tokens, rows, shard, device, parts.fixed)
            batch = {"anchor": batch, "positive": positive}
        return epoch, rows, shard, batch

    def evaluate(self, step: int) -> DevScore | None:
        """Rank 0 scores the dev set; the others wait at the end of the step."""
        if not self.writes or self.checked.dev is None:
            return None
        score = dev_score(self.checked.dev, self.parts.dev_encoder)
        return DevScore(score, {"score": score})

    @property
    def best_score(self) -> float | None:
        return self.state.best_score

    def selected(self, step: int, dev: DevScore, improved: bool) -> None:
        if improved:
            self.state.best_score, self.state.best_step = dev.score, step
        criterion = self.checked.dev
        record = {"step": step, f"dev_{criterion.primary_metric}": dev.score, "best": improved}
        ckpt.append_metrics(self.checked.metrics, record)
        best = " (best so far)" if improved else ""
        self.display.note(f"step {step}: {dev_label(criterion)} {dev.score:.4f}{best}")

    def save(self, step: int) -> None:
        if self.writes:
            checked = self.checked
            ckpt.save_checkpoint(
                checked.run_dir, self.parts.checkpoint, self.state, checked.meta, self.running.rank_rng
            )

    def end_step(self, step: int, due: Due) -> None:
        if due.evaluate or due.save:
            distributed.barrier(self.context)  # the other ranks wait for rank 0's evaluation and files
            self.running.speed.rate()  # the next rate counts steps only, not this evaluation and checkpoint
        if self.job.on_step is not None:
            self.job.on_step(step, self.state.last_losses)

    def kept_step(self) -> Kept:
        """The best dev checkpoint, else the last weights; on the user's own judged queries, a run
        that never beat the base gives the base back."""
        state = self.state
        if keeps_base(self.config, state):
            self.display.note(
                f"no checkpoint beat the base model on {self.config.dev_retrieval} "
                f"({dev_label(self.checked.dev)}: best {state.best_score:.4f}, base {state.base_score:.4f}): "
                "the output is the base model"
            )
            return BASE
        return state.best_step

    def finish(self, kept: Kept) -> TrainResult:
        """The model folder replaces `out`; the run folder's metrics are copied into it."""
        state, model, checked, out = self.state, self.model, self.checked, self.job.out
        if self.writes:
            done = {"event": "done", "step": state.step, "best_step": state.best_step}
            ckpt.append_metrics(checked.metrics, done)
            metadata = train_metadata(
                self.config,
                checked.meta,
                state,
                self.job.corpus,
                checked.sample,
                checked.spec.path,
                checked.dev,
            )
            dense = model.rotation_weight() if kept != BASE else None  # the base is given back as it was
            write_model_folder(
                out, model.backbone, checked.spec.path, model.pooling, checked.spec.max_seq_length, metadata,
                extra_files={ckpt.METRICS: checked.metrics}, dense=dense,
            )  # fmt: skip
            if checked.run_dir != out:
                shutil.rmtree(checked.run_dir, ignore_errors=True)
        distributed.barrier(self.context)  # the other ranks return once the model folder is in place
        label = dev_label(checked.dev) if checked.dev is not None else None
        return TrainResult(
            out, self.config.method, state.step, len(checked.sample), checked.sample.stats, state.best_score,
            state.best_step, state.base_score, state.last_losses, state.seconds, label, kept == BASE,
        )  # fmt: skip


def rank_batch(
    tokens: TokenTable, rows: np.ndarray, shard: distributed.BatchShard, device: torch.device, fixed: bool
) -> dict[str, torch.Tensor]:
    """This rank's slice of the global batch `rows`, padded to the whole batch's longest sentence
    (so every rank has the single-process width), or to the table's width with `fixed` shapes."""
    width = tokens.width if fixed else tokens.longest(rows)
    return step_speed.to_device(tokens.batch(shard.take(rows), width), device)


def _stop_nonfinite(checked: Checked, step: int, terms: dict[str, float], main: bool) -> None:
    """Record the first step whose loss was not finite and stop with `RunFailure`."""
    if main:
        ckpt.append_metrics(checked.metrics, {"event": "nonfinite", "step": step, **terms})
    last = ckpt.latest_checkpoint(checked.run_dir)
    kept = f"the last good checkpoint is {last}" if last else "no checkpoint was written yet"
    raise RunFailure(
        f"the loss became {terms['loss']} at step {step} ({format_terms(terms)}); "
        f"training stopped, {kept}; try a lower learning rate"
    )


__all__ = [
    "Checked",
    "JobInputs",
    "RunParts",
    "Running",
    "TrainResult",
    "TrainRun",
    "build_parts",
    "rank_batch",
]
