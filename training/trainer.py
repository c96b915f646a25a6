"""`embedkit train`: a sentence encoder trained on a corpus, one job of the shared loop (`loop.run`).

`TrainJob` supplies the loop's phases: every input checked (nothing is written for bad input); the
model (`model.ContrastiveModel`); the base scored on the dev set, or a checkpoint resumed; the steps,
batch -> miCSE objective -> optimizer -> momentum update, logged to `OUT/metrics.jsonl`; at the end
the best checkpoint (or the last weights, without a dev set) becomes the model folder (`save`), which
replaces `OUT` atomically, so the checkpoints disappear with the unfinished run. With `overwrite` of
a non-empty `OUT`, the run lives beside it (`run_folder`) until the new model replaces
`OUT`: a failed or killed run leaves the old folder as it was. One writer at a time trains into `OUT`
(`embedkit.storage.locking`). Under torchrun (`distributed`) every rank runs the job: each embeds its
slice of every global batch through DistributedDataParallel, and rank 0 alone holds the lock,
evaluates, logs, writes the checkpoints and the model folder while the others wait at a barrier.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
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
from embedkit.training import aux_stage1, distributed, loop, rotation, run_folder, step_speed
from embedkit.training import checkpoint as ckpt
from embedkit.training.batches import autocast, epoch_order, resolve_precision, steps_per_epoch
from embedkit.training.checkpoint import BASE, BestWeights, Kept, TrainState
from embedkit.training.checkpoint_selection import InferenceEncoder, dev_evaluator, dev_label, dev_score
from embedkit.training.config import TrainConfig
from embedkit.training.display import TrainDisplay, format_terms
from embedkit.training.loop import DevScore, Due, Schedule
from embedkit.training.model import ContrastiveModel, StepOutput
from embedkit.training.optimizer import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.save import keeps_base, train_metadata, write_model_folder
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
    out = Path(out_dir).expanduser()
    with distributed.session(config.device, config.dist_timeout) as context:
        job = TrainJob(corpus, out, config, context, progress, resume, overwrite, on_step)
        with write_lock(out) if context.is_main else nullcontext():  # rank 0 holds it for all of them
            return loop.run(job)


@dataclass
class TrainJob:
    """One `embedkit train` run on this process, as the loop's `Job`: its methods in the loop's order."""

    corpus: str | Path | Sequence[str]
    out: Path
    config: TrainConfig
    context: distributed.Context
    show_progress: bool
    resume: bool
    overwrite: bool
    on_step: StepCallback | None

    def __post_init__(self) -> None:
        self.writes = self.context.is_main
        self.state = TrainState()

    def check(self) -> None:
        """Every input, before anything is written (every rank checks, rank 0 writes)."""
        config, context, out = self.config, self.context, self.out
        self.dev = dev_evaluator(config, self.corpus)
        # the dev pseudo queries' sentences are held out of training
        self.sample = load_examples(self.corpus, config, getattr(self.dev, "pseudo_set", None))
        if len(self.sample) < 2:
            raise InputError("contrastive training needs at least 2 distinct sentences")
        if config.batch_size % context.world_size:
            raise InputError(
                f"--batch-size {config.batch_size} does not divide by the {context.world_size} ranks: "
                "each rank takes an equal slice of every batch"
            )
        self.device = context.device
        self.dtype = resolve_precision(config.precision, self.device)
        step_speed.check_compile(config.compile, self.device)
        self.spec = read_model_spec(config.base_model)
        if self.spec.kind != "torch":
            raise InputError(f"--base {self.spec.path} is an ONNX folder: training needs the torch model")
        config.check_matryoshka(self.spec.dim)
        # what the run is made from: its checkpoints record it, a resume compares it
        self.meta = {
            "config": config.to_dict(),
            "data_fingerprint": self.sample.fingerprint,
            "base_fingerprint": model_fingerprint(self.spec.path),
        }
        if config.matryoshka_dims:  # what an earlier embedkit's Matryoshka checkpoint lacks
            self.meta["matryoshka_head_reads"] = ckpt.MATRYOSHKA_HEAD_READS
        self.resume_from = run_folder.prepare_out_dir(out, self.resume, self.overwrite)
        if self.resume_from is not None:
            ckpt.check_train_resumable(self.resume_from, config, self.meta)
        fresh = self.resume_from is None
        self.aux_sentences = aux_stage1.stage1_sentences(config, self.sample.anchors) if fresh else None
        replacing = run_folder.replaces(out, self.resume_from)
        distributed.barrier(context)  # every rank has looked at OUT before rank 0 changes it
        self.run_dir = run_folder.run_dir(out, replacing, self.writes)

    def build(self) -> None:
        """The model (the head's init is seeded), tokenized data, optimizer, schedule, RNGs."""
        config, spec, device = self.config, self.spec, self.device
        torch.manual_seed(config.seed)
        model = self.model = ContrastiveModel.from_folder(spec.path, config).to(device)
        positions = position_limit(model.backbone.config)
        anchors, positives = self.sample.anchors, self.sample.positives or []
        self.tokens = TokenTable.from_model(spec.path, min(config.max_seq_length, positions), anchors)
        # crop/ict positives are passages: their own truncation length (config.positive_max_length),
        # never longer than the base model has position embeddings for
        positive_length = min(config.positive_max_length, positions)
        self.positive_tokens = TokenTable.from_model(spec.path, positive_length, positives)
        # The dev criterion embeds at the inference length, as a user of the saved folder will.
        batcher = TokenBatcher(spec.path, spec.max_seq_length)
        self.dev_encoder = InferenceEncoder(model, batcher, self.dtype, spec.path)
        self.per_epoch = steps_per_epoch(len(self.sample), config.batch_size, self.context.world_size)
        total = int(min(config.epochs * self.per_epoch, config.max_steps or math.inf))
        optimizer = make_optimizer(model, config)
        scheduler = make_scheduler(optimizer, total, config.warmup_ratio)
        scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None
        self.generator = torch.Generator(device=device).manual_seed(config.seed) if config.uses_ami else None
        if model.aux is not None:  # InfoCSE's masking RNG, and the host one of its dropout seeds
            model.aux.generator = torch.Generator(device=device).manual_seed(config.seed)
            model.aux.host_seeds.manual_seed(config.seed)
        generators = {
            "ami_sampler": self.generator,
            "aux_masking": model.aux.generator if model.aux is not None else None,
            "aux_dropout_seeds": model.aux.host_seeds if model.aux is not None else None,
        }
        self.parts = ckpt.Parts(model, optimizer, scheduler, scaler, generators, ckpt.QueueFile(model))
        if self.context.rank > 0:  # its own dropout masks; rank 0 keeps the single-process stream
            torch.manual_seed(distributed.rank_seed(config.seed, self.context.rank))
        eval_steps = config.eval_steps if self.dev is not None else None
        self.schedule = Schedule(total, eval_steps, config.save_steps)
        self.best = BestWeights(self.run_dir, model.backbone, "backbone.safetensors", spec.path)

    def begin(self) -> int:
        """Resume from the last checkpoint, or start afresh with the base model's dev score."""
        config, context = self.config, self.context
        if self.writes:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = self.run_dir / ckpt.METRICS
        self.display = display = TrainDisplay(self.schedule.total, enabled=self.show_progress and self.writes)
        ranks = f" x {context.world_size} ranks ({context.backend})" if context.distributed else ""
        steps = f"{self.schedule.total} steps on {self.device.type}{ranks}"
        display.note(f"{config.method}: {self.sample.stats.describe()}; {steps}")
        if config.ami_dropped:
            display.note(
                f"note: AMI compares dropout views of the same tokens; --views {config.views} turns it off"
            )
        world = {"world_size": context.world_size}
        if self.resume_from is not None:
            self._resume(self.resume_from, world)
        elif self.writes:
            self._start(world)
        step_speed.compile_model(self.model, config.compile, self.device)
        self.network = distributed.data_parallel(self.model, context)
        self.fixed = step_speed.fixed_shapes(config, self.device)  # pad to max_seq_length: one shape
        self.every = step_speed.log_every(config, self.device)
        return self.state.step

    def _resume(self, path: Path, world: dict[str, int]) -> None:
        context = self.context
        rank = context.rank if context.distributed else None
        self.state = ckpt.load_checkpoint(path, self.parts, TrainState, rank=rank, prune=self.writes)
        if context.rank > 0 and not ckpt.has_rank_rng(path, context.rank):
            torch.manual_seed(distributed.rank_seed(self.config.seed, context.rank, self.state.step))
        if self.writes:
            ckpt.truncate_metrics(self.metrics, self.state.step)
            ckpt.append_metrics(self.metrics, {"event": "resume", "step": self.state.step, **world})
        self.display.note(f"resumed from step {self.state.step}")

    def _start(self, world: dict[str, int]) -> None:
        config, model, dev = self.config, self.model, self.dev
        if self.overwrite:
            ckpt.remove_checkpoints(self.run_dir)
            self.metrics.unlink(missing_ok=True)
        # Stage 1 (or its cache) before the first step, on its own RNG streams; DDP then hands
        # rank 0's auxiliary weights to the other ranks.
        if model.aux is not None:
            self.meta["aux_stage1"] = aux_stage1.prepare_aux(
                model, config, self.aux_sentences, self.meta["base_fingerprint"], self.spec.path, self.device,
                self.dtype, self.display.note,
            )  # fmt: skip
        if config.rotates:  # before the base's dev score, which the (orthogonal) rotation keeps
            self._fit_rotation()
        total, sentences = self.schedule.total, len(self.sample)
        start = {"event": "start", "step": 0, "steps": total, "sentences": sentences, **world, **self.meta}
        ckpt.append_metrics(self.metrics, start)
        if dev is not None:
            self.state.base_score = dev_score(dev, self.dev_encoder)
            record = {"step": 0, f"dev_{dev.primary_metric}": self.state.base_score, "base": True}
            ckpt.append_metrics(self.metrics, record)
            self.display.note(f"base model: {dev_label(dev)} {self.state.base_score:.4f}")

    def _fit_rotation(self) -> None:
        """Matryoshka's start: the pooled vectors rotated onto their principal axes over a sample of
        the corpus's documents (`training.rotation`); the other ranks receive it with the weights."""
        started = time.perf_counter()
        documents = rotation.rotation_documents(self.corpus, self.config)
        self.display.note(f"embedding {len(documents):,} documents for Matryoshka's rotation")
        batch, bar = self.config.eval_batch_size, self.show_progress and self.writes
        rotation.fit_rotation(self.model.rotation, self.dev_encoder, documents, batch, progress=bar)
        seconds = time.perf_counter() - started
        self.display.note(f"rotated onto the principal axes of {len(documents):,} documents, {seconds:.1f} s")

    @contextmanager
    def progress(self, done: int) -> Iterator[None]:
        """The progress bar; the loss terms stay on the device between reads (a read is a host sync)."""
        self.display.start(done)
        self.started = time.perf_counter() - self.state.seconds
        self.losses, self.speed, self.rate = step_speed.LossReader(), step_speed.Throughput(), 0.0
        self.order_of: tuple[int, np.ndarray] | None = None  # (epoch, its order): one shuffle an epoch
        try:
            yield
        finally:
            self.display.stop()

    def step(self, step: int, due: Due) -> None:
        """Batch -> objective -> optimizer -> momentum update; the losses come to the host only
        when a record, a score or a checkpoint needs them."""
        state, config, model = self.state, self.config, self.model
        epoch, rows, shard, batch = self._batch(step)
        self.network.train()
        with autocast(self.device, self.dtype):
            result = StepOutput(**self.network(batch, self.generator, shard))
        self.losses.add(step, result.total, result.terms)
        self.speed.add(len(rows))
        log = step % self.every == 0 or step == self.schedule.total
        if log or due.evaluate or due.save:
            state.last_losses, bad_step = self.losses.read()
            rate = self.speed.rate()
            if bad_step is not None:  # the whole batch's loss: every rank stops here
                _stop_nonfinite(self.metrics, self.run_dir, bad_step, state.last_losses, self.writes)
            self.display.rate(rate)
            self.rate = rate
        optimizer, scheduler, scaler = self.parts.optimizer, self.parts.scheduler, self.parts.scaler
        lr = scheduler.get_last_lr()[0]
        optimizer_step(result.loss, model, optimizer, scheduler, scaler, config.max_grad_norm)
        model.after_step(result.keys)  # momentum EMA, then this step's keys enter the queue
        state.step = step
        state.seconds = time.perf_counter() - self.started
        terms = state.last_losses  # those of the last read step
        if self.writes and log:
            queued = len(model.queue) if model.queue is not None else 0
            # seconds of training so far: differences between records are step times
            record = {"step": step, "epoch": epoch, "lr": lr, **terms, "queue": queued}
            record |= {"sentences_per_s": round(self.rate, 1), "seconds": round(state.seconds, 3)}
            ckpt.append_metrics(self.metrics, record)
        self.display.advance(step, terms)
        # every rank's RNG goes into the checkpoint: gathered on all ranks, before rank 0 evaluates
        gather = due.save and self.context.distributed
        self.rank_rng = distributed.gather_rng_states(self.context) if gather else None

    def _batch(self, step: int) -> tuple[int, np.ndarray, distributed.BatchShard, dict]:
        """The epoch, the global batch's rows, this rank's share, and its tensors."""
        epoch, offset = divmod(step - 1, self.per_epoch)
        if self.order_of is None or self.order_of[0] != epoch:
            self.order_of = (epoch, epoch_order(len(self.sample), self.config.seed, epoch))
        size = self.config.batch_size
        rows = self.order_of[1][offset * size : (offset + 1) * size]
        shard = distributed.BatchShard.split(len(rows), self.context)
        batch = _rank_batch(self.tokens, rows, shard, self.device, self.fixed)
        if self.sample.positives is not None:
            positive = _rank_batch(self.positive_tokens, rows, shard, self.device, self.fixed)
            batch = {"anchor": batch, "positive": positive}
        return epoch, rows, shard, batch

    def evaluate(self, step: int) -> DevScore | None:
        """Rank 0 scores the dev set; the others wait at the end of the step."""
        if not self.writes or self.dev is None:
            return None
        score = dev_score(self.dev, self.dev_encoder)
        return DevScore(score, {"score": score})

    @property
    def best_score(self) -> float | None:
        return self.state.best_score

    def selected(self, step: int, dev: DevScore, improved: bool) -> None:
        if improved:
            self.state.best_score, self.state.best_step = dev.score, step
        record = {"step": step, f"dev_{self.dev.primary_metric}": dev.score, "best": improved}
        ckpt.append_metrics(self.metrics, record)
        best = " (best so far)" if improved else ""
        self.display.note(f"step {step}: {dev_label(self.dev)} {dev.score:.4f}{best}")

    def save(self, step: int) -> None:
        if self.writes:
            ckpt.save_checkpoint(self.run_dir, self.parts, self.state, self.meta, self.rank_rng)

    def end_step(self, step: int, due: Due) -> None:
        if due.evaluate or due.save:
            distributed.barrier(self.context)  # the other ranks wait for rank 0's evaluation and files
            self.speed.rate()  # the next rate counts steps only, not this evaluation and checkpoint
        if self.on_step is not None:
            self.on_step(step, self.state.last_losses)

    def kept_step(self) -> Kept:
        """The best dev checkpoint, else the last weights; on the user's own judged queries, a run
        that never beat the base gives the base back."""
        state = self.state
        if keeps_base(self.config, state):
            self.display.note(
                f"no checkpoint beat the base model on {self.config.dev_retrieval} ({dev_label(self.dev)}: "
                f"best {state.best_score:.4f}, base {state.base_score:.4f}): the output is the base model"
            )
            return BASE
        return state.best_step

    def finish(self, kept: Kept) -> TrainResult:
        """The model folder replaces `out`; the run folder's metrics are copied into it."""
        state, model, spec = self.state, self.model, self.spec
        if self.writes:
            done = {"event": "done", "step": state.step, "best_step": state.best_step}
            ckpt.append_metrics(self.metrics, done)
            metadata = train_metadata(
                self.config, self.meta, state, self.corpus, self.sample, spec.path, self.dev
            )
            dense = model.rotation_weight() if kept != BASE else None  # the base is given back as it was
            write_model_folder(
                self.out, model.backbone, spec.path, model.pooling, spec.max_seq_length, metadata,
                extra_files={ckpt.METRICS: self.metrics}, dense=dense,
            )  # fmt: skip
            if self.run_dir != self.out:
                shutil.rmtree(self.run_dir, ignore_errors=True)
        distributed.barrier(self.context)  # the other ranks return once the model folder is in place
        label = dev_label(self.dev) if self.dev is not None else None
        return TrainResult(
            self.out, self.config.method, state.step, len(self.sample), self.sample.stats, state.best_score,
            state.best_step, state.base_score, state.last_losses, state.seconds, label, kept == BASE,
        )  # fmt: skip


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
