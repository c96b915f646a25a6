"""`embedkit train`: a sentence encoder trained on a corpus, one job of the shared loop (`loop.run`).

`TrainJob` supplies the loop's phases, each handing on what it made: every input checked (`check`,
nothing is written for bad input: `Checked`); the model (`model.ContrastiveModel`) and what its
steps use, with the base scored on the dev set or a checkpoint resumed (`build`: a
`train_run.TrainRun`); the steps, batch -> the method's terms -> optimizer -> momentum update,
logged to `OUT/metrics.jsonl`; at the end the best checkpoint (or the last weights, without a dev
set) becomes the model folder (`save`), which replaces `OUT` atomically, so the checkpoints
disappear with the unfinished run. With `overwrite` of a non-empty `OUT`, the run lives beside it
(`run_folder`) until the new model replaces `OUT`: a failed or killed run leaves the old folder as
it was. One writer at a time trains into `OUT` (`embedkit.storage.locking`). Under torchrun
(`distributed`) every rank runs the job: each embeds its slice of every global batch through
DistributedDataParallel, and rank 0 alone holds the lock, evaluates, logs, writes the checkpoints
and the model folder while the others wait at a barrier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import read_model_spec
from embedkit.errors import InputError
from embedkit.evaluation.pseudo_queries import PseudoQueryEvaluator
from embedkit.storage.locking import write_lock
from embedkit.training import aux_stage1, distributed, loop, rotation, run_folder, step_speed
from embedkit.training import checkpoint as ckpt
from embedkit.training.batches import resolve_precision
from embedkit.training.checkpoint import TrainState
from embedkit.training.checkpoint_selection import dev_evaluator, dev_label, dev_score
from embedkit.training.config import TrainConfig
from embedkit.training.display import TrainDisplay
from embedkit.training.train_run import Checked, RunParts, TrainResult, TrainRun, build_parts
from embedkit.training.views import load_examples

StepCallback = Callable[[int, dict[str, float]], None]


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


@dataclass(frozen=True)
class TrainJob:
    """One `embedkit train` run on this process, as the loop's `Job`: `check` hands what it found to
    `build`, which returns the run of the steps (`train_run.TrainRun`), resumed or scored."""

    corpus: str | Path | Sequence[str]
    out: Path
    config: TrainConfig
    context: distributed.Context
    show_progress: bool
    resume: bool
    overwrite: bool
    on_step: StepCallback | None

    @property
    def writes(self) -> bool:
        return self.context.is_main

    def check(self) -> Checked:
        """Every input, before anything is written (every rank checks, rank 0 writes)."""
        config, context, out = self.config, self.context, self.out
        dev = dev_evaluator(config, self.corpus)
        # the dev pseudo queries' sentences are held out of training
        held_out = dev.pseudo_set if isinstance(dev, PseudoQueryEvaluator) else None
        sample = load_examples(self.corpus, config, held_out)
        if len(sample) < 2:
            raise InputError("contrastive training needs at least 2 distinct sentences")
        if config.batch_size % context.world_size:
            raise InputError(
                f"--batch-size {config.batch_size} does not divide by the {context.world_size} ranks: "
                "each rank takes an equal slice of every batch"
            )
        dtype = resolve_precision(config.precision, context.device)
        step_speed.check_compile(config.compile, context.device)
        spec = read_model_spec(config.base_model)
        if spec.kind != "torch":
            raise InputError(f"--base {spec.path} is an ONNX folder: training needs the torch model")
        config.check_matryoshka(spec.dim)
        meta = {
            "config": config.to_dict(),
            "data_fingerprint": sample.fingerprint,
            "base_fingerprint": model_fingerprint(spec.path),
        }
        if config.matryoshka_dims:  # what an earlier embedkit's Matryoshka checkpoint lacks
            meta["matryoshka_head_reads"] = ckpt.MATRYOSHKA_HEAD_READS
        resume_from = run_folder.prepare_out_dir(out, self.resume, self.overwrite)
        if resume_from is not None:
            ckpt.check_train_resumable(resume_from, config, meta)
        aux_sentences = aux_stage1.stage1_sentences(config, sample.anchors) if resume_from is None else None
        replacing = run_folder.replaces(out, resume_from)
        distributed.barrier(context)  # every rank has looked at OUT before rank 0 changes it
        run_dir = run_folder.run_dir(out, replacing, self.writes)
        return Checked(dev, sample, context.device, dtype, spec, meta, resume_from, aux_sentences, run_dir)

    def build(self, checked: Checked) -> TrainRun:
        """The model and everything its steps use (`train_run.build_parts`), resumed from the last
        checkpoint or started afresh with the base model's dev score; then compiled and wrapped."""
        config, context = self.config, self.context
        parts = build_parts(config, context, checked)
        if self.writes:
            checked.run_dir.mkdir(parents=True, exist_ok=True)
        display = TrainDisplay(parts.schedule.total, enabled=self.show_progress and self.writes)
        ranks = f" x {context.world_size} ranks ({context.backend})" if context.distributed else ""
        steps = f"{parts.schedule.total} steps on {checked.device.type}{ranks}"
        display.note(f"{config.method}: {checked.sample.stats.describe()}; {steps}")
        if config.ami_dropped:
            display.note(
                f"note: AMI compares dropout views of the same tokens; --views {config.views} turns it off"
            )
        world = {"world_size": context.world_size}
        if checked.resume_from is not None:
            state = self._resume(checked, parts, display, world)
        else:
            state = self._start(checked, parts, display, world)
        step_speed.compile_model(parts.model, config.compile, checked.device)
        network = distributed.data_parallel(parts.model, context)
        return TrainRun(self, checked, parts, state, network, display)

    def _resume(self, checked: Checked, parts: RunParts, display: TrainDisplay, world: dict) -> TrainState:
        context, path = self.context, checked.resume_from
        rank = context.rank if context.distributed else None
        state = ckpt.load_checkpoint(path, parts.checkpoint, TrainState, rank=rank, prune=self.writes)
        if context.rank > 0 and not ckpt.has_rank_rng(path, context.rank):
            torch.manual_seed(distributed.rank_seed(self.config.seed, context.rank, state.step))
        if self.writes:
            ckpt.truncate_metrics(checked.metrics, state.step)
            ckpt.append_metrics(checked.metrics, {"event": "resume", "step": state.step, **world})
        display.note(f"resumed from step {state.step}")
        return state

    def _start(self, checked: Checked, parts: RunParts, display: TrainDisplay, world: dict) -> TrainState:
        state = TrainState()
        if not self.writes:
            return state
        config, model, dev, metrics = self.config, parts.model, checked.dev, checked.metrics
        if self.overwrite:
            ckpt.remove_checkpoints(checked.run_dir)
            metrics.unlink(missing_ok=True)
        # Stage 1 (or its cache) before the first step, on its own RNG streams; DDP then hands
        # rank 0's auxiliary weights to the other ranks.
        if model.aux is not None:
            checked.meta["aux_stage1"] = aux_stage1.prepare_aux(
                model, config, checked.aux_sentences, checked.meta["base_fingerprint"], checked.spec.path,
                checked.device, checked.dtype, display.note,
            )  # fmt: skip
        if config.rotates:  # before the base's dev score, which the (orthogonal) rotation keeps
            self._fit_rotation(parts, display)
        total, sentences = parts.schedule.total, len(checked.sample)
        start = {"event": "start", "step": 0, "steps": total, "sentences": sentences, **world, **checked.meta}
        ckpt.append_metrics(metrics, start)
        if dev is not None:
            state.base_score = dev_score(dev, parts.dev_encoder)
            record = {"step": 0, f"dev_{dev.primary_metric}": state.base_score, "base": True}
            ckpt.append_metrics(metrics, record)
            display.note(f"base model: {dev_label(dev)} {state.base_score:.4f}")
        return state

    def _fit_rotation(self, parts: RunParts, display: TrainDisplay) -> None:
        """Matryoshka's start: the pooled vectors rotated onto their principal axes over a sample of
        the corpus's documents (`training.rotation`); the other ranks receive it with the weights."""
        started = time.perf_counter()
        documents = rotation.rotation_documents(self.corpus, self.config)
        display.note(f"embedding {len(documents):,} documents for Matryoshka's rotation")
        batch, bar = self.config.eval_batch_size, self.show_progress and self.writes
        rotation.fit_rotation(parts.model.rotation, parts.dev_encoder, documents, batch, progress=bar)
        seconds = time.perf_counter() - started
        display.note(f"rotated onto the principal axes of {len(documents):,} documents, {seconds:.1f} s")
