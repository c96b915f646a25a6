"""`embedkit adapt INDEX`: distil the index's hybrid ranking into its dense model, label-free.

`adapt` runs `AdaptJob` through the training loop that `embedkit train` runs too (`loop.run`); its
methods are the loop's phases, in order:
1. Check the inputs (the index has a lexical side, its model is a torch folder this code can save);
   pseudo queries from the index's own documents (`queries`), a held-out share for dev.
2. The teacher: the index's hybrid ranking of every query (`SearchIndex.search_text`), mined into
   each query's candidate list and hard negatives; the student, the dense encoder (backbone + the
   model's pooling).
3. The base model's dev scores, or a killed run's checkpoint.
4. The steps, on the query side: listwise KL to the teacher's distribution over the candidates
   (`losses.listwise_kl`), plus InfoNCE over in-batch positives and hard negatives
   (`losses.info_nce`). Each query's positive (its document, without the ICT sentence or title) is
   embedded every step by the current model without gradient; the other candidates' vectors start as
   the index's own and are embedded again by the current model at every dev evaluation (ANCE's
   refreshed negatives, Xiong et al. 2021). Every `eval_steps` the dev score (held-out pseudo
   queries' nDCG@10, or judged queries with `dev_retrieval`).
5. The best weights, or the base when no step clears the margin (`signals.kept_step`), become the
   model folder.
The caller (`embedkit adapt`) then re-embeds the index with it (`embedkit.jobs.index_reembed`).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from embedkit.encode.devices import torch_device
from embedkit.encode.identity import model_fingerprint
from embedkit.encode.st_modules import DenseLayer, SentenceModules
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.errors import InputError, RunFailure
from embedkit.index.folder import check_model_for
from embedkit.index.layout import check_not_in_index
from embedkit.index.search import SearchIndex
from embedkit.progress import ProgressBar
from embedkit.storage.locking import write_lock
from embedkit.training import checkpoint as ckpt
from embedkit.training import loop, run_folder
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.dev import DevSet
from embedkit.training.adapt.queries import (
    HARD_NEGATIVE_RANKS,
    Candidates,
    PseudoQuery,
    by_kind,
    endless_batches,
    make_pseudo_queries,
    mine_candidates,
    near_duplicates,
    words,
)
from embedkit.training.adapt.signals import SIGNALS, kept_step
from embedkit.training.adapt.student import StudentEmbedder, step_loss
from embedkit.training.batches import resolve_precision
from embedkit.training.checkpoint import BASE, AdaptState, BestWeights, CandidateVectors, Kept
from embedkit.training.loop import DevScore, Due, Schedule
from embedkit.training.optimizer import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.save import write_model_folder

TEACHER_CHUNK = 128  # queries per hybrid search call (one progress-bar tick)
Note = Callable[[str], None]


@dataclass(frozen=True)
class AdaptResult:
    """What an adapt run produced: the model folder and its dev scores before and after."""

    out_dir: Path
    steps: int
    queries: dict[str, int]  # training queries by kind
    dev_label: str  # the score the best step was chosen on, e.g. "dev pseudo ndcg@10"
    base_scores: dict[str, float]  # label -> the base model's score (label-free, and judged if given)
    adapted_scores: dict[str, float]  # label -> the saved model's score
    best_step: int | None  # the step whose model was saved; None: the base was kept
    seconds: float
    resumed_from: int | None = None  # the checkpoint's step, when a killed run was continued
    margin: float = 0.0  # what the selected score had to gain over the base's for a step to be kept
    forced: bool = False  # --force: the best step kept whatever its score
    history: tuple[tuple[int, dict[str, float]], ...] = ()  # (step, scores) at each dev evaluation

    @property
    def base_dev_score(self) -> float:
        return self.base_scores[self.dev_label]

    @property
    def kept_base(self) -> bool:
        return self.best_step is None


def adapt(
    index_path: str | Path,
    out_dir: str | Path,
    config: AdaptConfig | None = None,
    *,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
    note: Note = lambda text: None,
) -> AdaptResult:
    """Adapt the dense model of the index in `index_path` to its documents; write the model to `out_dir`.

    The run checkpoints into `out_dir/checkpoints/` at each dev evaluation; `resume` continues a
    killed run from its last one (same index, same settings), and ends where the run would have.
    Raises `InputError` for bad input (before anything is written) and `RunFailure` when the loss
    stops being finite. The index itself is not changed here (see `embedkit.jobs.index_reembed`).
    """
    config = (config or AdaptConfig()).validate()
    out = Path(out_dir).expanduser()
    check_not_in_index(out)  # the index would delete the model it records
    with write_lock(out), SearchIndex.load(index_path) as index:
        resume_from = run_folder.prepare_out_dir(out, resume, overwrite)
        # overwriting a finished folder: the run lives beside it until the new model replaces it
        run_dir = run_folder.run_dir(out, run_folder.replaces(out, resume_from))
        return loop.run(AdaptJob(index, out, run_dir, resume_from, config, progress, note))


@dataclass
class AdaptJob:
    """One `embedkit adapt` run, as the training loop's `Job`: its methods in the loop's order."""

    index: SearchIndex
    out: Path
    run_dir: Path
    resume_from: Path | None
    config: AdaptConfig
    show_progress: bool
    note: Note

    def __post_init__(self) -> None:
        self.writes = True
        self.started = time.perf_counter()

    def check(self) -> None:
        """The index, its model and device, then the pseudo queries; the dev share is held out by document."""
        index, config = self.index, self.config
        if not index.has_lexical:
            raise InputError(f"adapt distils the hybrid ranking: {index.no_lexical_reason()}")
        spec = self.spec = check_model_for(index.meta, config.base_model)
        if spec.kind != "torch":
            raise InputError(f"{spec.path} is an ONNX folder: adapt needs the torch model (--base FOLDER)")
        if spec.pooling not in ("mean", "cls") or (spec.modules is not None and _has_dense(spec.modules)):
            raise InputError(
                f"{spec.path}: adapt saves mean or cls pooling without Dense layers, not {spec.pooling}"
            )
        # before the minutes of mining: `cuda` without a GPU, or fp16 on the CPU, fails here
        self.device = torch_device(config.device)
        self.dtype = resolve_precision(config.precision, self.device)
        self.dev_judged = None
        if config.dev_retrieval:
            from embedkit.evaluation.retrieval import RetrievalEvaluator

            self.dev_judged = RetrievalEvaluator(config.dev_retrieval, batch_size=64, mode="dense")
        if index.passages:  # the mining pairs each document with one vector
            raise InputError(f"adapt works on an index of whole documents; {index.path} holds passages")
        documents = [d for d in index.rows.documents(range(len(index.rows))) if d is not None]
        if len(documents) != len(index.rows) or len(documents) < 3:
            raise InputError(f"the index {index.path} needs at least 3 documents in rows 0..n-1 to adapt on")
        self.documents = documents
        queries = make_pseudo_queries(documents, config.kinds, config.seed)
        self.train_queries, self.dev_queries = split_queries(queries, config)
        fingerprint = model_fingerprint(spec)
        self.made_from = _made_from(index, fingerprint, self.train_queries, self.dev_queries, config)
        if self.resume_from is not None:
            ckpt.check_adapt_resumable(self.resume_from, config, self.made_from)
        held_out = f"{len(self.dev_queries):,} held out"
        self.note(f"{len(self.train_queries):,} pseudo queries ({by_kind(self.train_queries)}), {held_out}")

    def build(self, checked: None = None) -> AdaptJob:
        """The teacher's candidates, then the student and its optimizer, schedule and sampler; the
        job itself runs the steps."""
        config, device, documents = self.config, self.device, self.documents
        word_sets = {row: set(words(doc.full_text)) for row, doc in enumerate(documents)}
        self.mined = teacher_candidates(self.index, self.train_queries, word_sets, config, self.show_progress)
        dev_copies = [near_duplicates(q.source, range(len(documents)), word_sets) for q in self.dev_queries]
        torch.manual_seed(config.seed)
        student = self.student = TorchEncoder(self.spec, device=str(device))
        optimizer = make_optimizer(student.model, config)
        scheduler = make_scheduler(optimizer, config.steps, config.warmup_ratio)
        scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None
        index_vectors = self.index.rows.vectors(list(range(len(self.index.rows))))
        self.negatives = CandidateVectors(
            torch.from_numpy(index_vectors).to(device), random.Random(config.seed)
        )
        self.parts = ckpt.Parts(student.model, optimizer, scheduler, scaler, extra=self.negatives)
        self.embed = StudentEmbedder(student, self.dtype)
        self.texts = [d.full_text for d in documents]
        self.dev = DevSet(self.dev_queries, dev_copies, self.texts, config, self.dev_judged)
        # a checkpoint at each dev evaluation but the last: after it, the model folder is written
        self.schedule = Schedule(config.steps, config.eval_steps, config.eval_steps, save_last=False)
        self.best = BestWeights(self.run_dir, student.model, "model.safetensors", self.spec.path)
        return self

    def begin(self) -> int:
        """The base model's dev scores (its top 10 too, for the overlap), or the checkpoint's state."""
        config = self.config
        self.dev.remember_base(
            self.embed, self.negatives.vectors.cpu().numpy()
        )  # the student is the base here
        if self.resume_from is not None:
            self.state = ckpt.load_checkpoint(self.resume_from, self.parts, AdaptState)
            self.note(f"resumed from step {self.state.step}")
        else:
            base = self._scores(refresh=False)
            self.state = AdaptState(0, SIGNALS[config.selection], base)
            self.note(f"base model: {self.state.selection} {base[self.state.selection]:.4f}")
        self.resumed_from = self.state.step if self.resume_from is not None else None
        sources = [q.source for q in self.train_queries]
        self.batches = endless_batches(sources, config.batch_size, config.seed)
        for _ in range(self.state.step):  # the order is a function of (seed, epoch): skip what was done
            next(self.batches)
        return self.state.step

    def progress(self, done: int) -> ProgressBar:
        self.bar = ProgressBar(self.config.steps, "adapting", enabled=self.show_progress, completed=done)
        return self.bar

    def step(self, step: int, due: Due) -> None:
        rows = next(self.batches)
        model, parts = self.student.model, self.parts
        model.train()
        queries, mined = [self.train_queries[i] for i in rows], [self.mined[i] for i in rows]
        negatives = self.negatives
        loss, terms = step_loss(self.embed, queries, mined, negatives.vectors, self.config, negatives.sampler)
        if not math.isfinite(loss.item()):
            raise RunFailure(f"the loss became {loss.item()} at step {step}; try a lower --lr")
        optimizer_step(loss, model, parts.optimizer, parts.scheduler, parts.scaler, self.config.max_grad_norm)
        self.state.step = step
        self.bar.advance()
        self.bar.update(status=" ".join(f"{k} {v:.4f}" for k, v in terms.items()))

    def _scores(self, refresh: bool) -> dict[str, float]:
        """Every dev signal's score by label (`signals`); the judged one when given. `refresh` embeds
        the candidates again with the current model first."""
        if refresh:
            vectors = self.embed.inference(self.texts, self.spec.max_seq_length, self.show_progress)
            self.negatives.vectors = torch.from_numpy(vectors).to(self.device)
        return self.dev.scores(self.embed, self.negatives.vectors.cpu().numpy())

    def evaluate(self, step: int) -> DevScore:
        scores = self._scores(refresh=True)
        self.state.history.append((step, scores))
        return DevScore(scores[self.state.selection], {"scores": scores})

    @property
    def best_score(self) -> float | None:
        return self.state.best_scores.get(self.state.selection)

    def selected(self, step: int, dev: DevScore, improved: bool) -> None:
        if improved:
            self.state.best_scores, self.state.best_step = self.state.history[-1][1], step
        best = " (best so far)" if improved else ""
        self.note(f"step {step}: {self.state.selection} {dev.score:.4f}{best}")

    def save(self, step: int) -> None:
        ckpt.save_checkpoint(self.run_dir, self.parts, self.state, self.made_from, advice="lower --lr")

    def end_step(self, step: int, due: Due) -> None:
        pass

    def kept_step(self) -> Kept:
        """The best step's weights if they clear the margin (`signals.kept_step`), else the base's."""
        config, state = self.config, self.state
        rule = (config.selection, config.margin, config.min_base_overlap, config.force)
        kept = kept_step(state.history, state.base_scores, *rule)
        if kept is None:
            self.note(
                f"no step gained {100 * config.margin:.2f} on {state.selection}: the output is the base model"
            )
            return BASE
        return kept

    def finish(self, kept: Kept) -> AdaptResult:
        config, state, spec = self.config, self.state, self.spec
        best_step = kept if isinstance(kept, int) else None
        adapted_scores = dict(state.history)[best_step] if best_step is not None else dict(state.base_scores)
        seconds = time.perf_counter() - self.started
        dev = {
            "label": state.selection,
            "margin": config.margin,
            "base_scores": state.base_scores,
            "adapted_scores": adapted_scores,
            "best_step": best_step,
            "history": [{"step": st, **sc} for st, sc in state.history],
        }
        metadata = {
            "method": f"adapt {config.method}",
            "adapt": {
                "config": config.to_dict(),
                "index": str(self.index.path),
                "made_from": self.made_from,
                "queries": by_kind(self.train_queries),
                "dev": dev,
                "seconds": round(seconds, 3),
                "resumed_from": self.resumed_from,
            },
            "base_model": {"path": str(spec.path), "fingerprint": model_fingerprint(spec)},
        }
        model = self.student.model
        write_model_folder(self.out, model, spec.path, spec.pooling, spec.max_seq_length, metadata)
        if self.run_dir != self.out:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        counts = {k: sum(q.kind == k for q in self.train_queries) for k in config.kinds}
        return AdaptResult(
            self.out, config.steps, counts, state.selection, state.base_scores, adapted_scores, best_step,
            seconds, self.resumed_from, config.margin, config.force, tuple(state.history),
        )  # fmt: skip


def _made_from(
    index: SearchIndex,
    model_fingerprint: str,
    train: Sequence[PseudoQuery],
    dev: Sequence[PseudoQuery],
    config: AdaptConfig,
) -> dict[str, object]:
    """What a checkpoint must have been made from to be resumed: the index and the queries."""
    digest = hashlib.sha256()
    for q in [*train, *dev]:
        digest.update(json.dumps([q.text, q.source, q.kind]).encode("utf-8"))
    meta = index.meta
    return {
        "index": {
            "version": index.version,
            "corpus_fingerprint": meta.get("corpus_fingerprint"),
            "model_fingerprint": model_fingerprint,
            "count": len(index.rows),
        },
        "queries": digest.hexdigest()[:16],
        "config": config.to_dict(),
    }


def split_queries(
    queries: list[PseudoQuery], config: AdaptConfig
) -> tuple[list[PseudoQuery], list[PseudoQuery]]:
    """(training, dev) queries: dev takes every query of `dev_queries` held-out documents' first kind,
    training at most `max_queries` of the others' queries, both drawn by the seed."""
    rng = random.Random(config.seed)
    sources = sorted({q.source for q in queries})
    held = set(rng.sample(sources, min(config.dev_queries, len(sources) // 2)))
    dev, seen = [], set()
    for q in queries:  # one dev query per held-out document, so each document counts once
        if q.source in held and q.source not in seen:
            dev.append(q)
            seen.add(q.source)
    train = [q for q in queries if q.source not in held]
    if len(train) > config.max_queries:
        train = rng.sample(train, config.max_queries)
    if len({q.source for q in train}) < 2:
        raise InputError("adapt needs pseudo queries from at least 2 documents besides the dev share")
    return train, dev


def teacher_candidates(
    index: SearchIndex,
    queries: Sequence[PseudoQuery],
    word_sets: dict[int, set[str]],
    config: AdaptConfig,
    progress: bool,
) -> list[Candidates]:
    """Each query's candidates and hard negatives from the index's hybrid ranking (`mine_candidates`)."""
    mined: list[Candidates] = []
    depth = HARD_NEGATIVE_RANKS[1]
    with ProgressBar(len(queries), "teacher", enabled=progress, rate_unit="queries/s") as bar:
        for start in range(0, len(queries), TEACHER_CHUNK):
            chunk = queries[start : start + TEACHER_CHUNK]
            hits = index.search_text([q.text for q in chunk], k=depth, mode="hybrid", fusion=config.fusion)
            for query, ranked in zip(chunk, hits, strict=True):
                ranking = [(h.row, float(h.score)) for h in ranked]
                copies = near_duplicates(query.source, [r for r, _ in ranking], word_sets)
                mined.append(mine_candidates(ranking, query.source, copies, config.source_margin))
            bar.advance(len(chunk))
    return mined


def _has_dense(modules: SentenceModules) -> bool:
    return any(isinstance(step, DenseLayer) for step in modules.steps)


__all__ = ["AdaptResult", "adapt", "split_queries", "step_loss", "teacher_candidates"]
