"""`embedkit adapt INDEX`: distil the index's hybrid ranking into its dense model, label-free.

Read top to bottom:
1. Check the inputs (the index has a lexical side, its model is a torch folder this code can save).
2. Pseudo queries from the index's own documents (`queries`), a held-out share for dev.
3. The teacher: the index's hybrid ranking of every query (`SearchIndex.search_text`), mined into
   each query's candidate list and hard negatives.
4. The student, the dense encoder (backbone + the model's pooling), trained on the query side:
   listwise KL to the teacher's distribution over the candidates (`losses.listwise_kl`),
   plus InfoNCE over in-batch positives and hard negatives (`losses.info_nce`). Each query's positive
   (its document, without the ICT sentence or title) is embedded every step by the current model
   without gradient; the other candidates' vectors start as the index's own and are embedded again
   by the current model at every dev evaluation (ANCE's refreshed negatives, Xiong et al. 2021).
5. Every `eval_steps` the dev score (held-out pseudo queries' nDCG@10, or judged queries with
   `dev_retrieval`); the best weights, or the base when nothing beat it, become the model folder.
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
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.errors import InputError, RunFailure
from embedkit.index.folder import check_model_for
from embedkit.index.layout import check_not_in_index
from embedkit.index.search import SearchIndex
from embedkit.progress import ProgressBar
from embedkit.storage.locking import write_lock
from embedkit.training import checkpoint as ckpt
from embedkit.training.adapt.checkpoint import (
    AdaptParts,
    AdaptState,
    check_adapt_resumable,
    load_adapt_best,
    load_adapt_checkpoint,
    save_adapt_best,
    save_adapt_checkpoint,
)
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.dev import DevSet
from embedkit.training.adapt.queries import (
    HARD_NEGATIVE_RANKS,
    Candidates,
    PseudoQuery,
    make_pseudo_queries,
    mine_candidates,
    near_duplicates,
    unique_source_batches,
    words,
)
from embedkit.training.adapt.signals import SIGNALS, kept_step
from embedkit.training.adapt.student import StudentEmbedder, step_loss
from embedkit.training.batches import resolve_precision
from embedkit.training.model import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.save import write_model_folder

TEACHER_CHUNK = 128  # queries per hybrid search call (one progress-bar tick)
PSEUDO_LABEL = SIGNALS["pseudo"]  # held-out pseudo queries' nDCG@10
JUDGED_LABEL = SIGNALS["judged"]  # the user's judged queries (--dev-retrieval)
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
        resume_from = ckpt.prepare_out_dir(out, resume, overwrite)
        busy = out.is_dir() and any(out.iterdir())
        # overwriting a finished folder: the run lives beside it until the new model replaces it
        run_dir = out if resume_from is not None or not busy else ckpt.overwrite_run_dir(out)
        result = _adapt(index, out, run_dir, resume_from, config, progress, note)
        if run_dir != out:
            shutil.rmtree(run_dir, ignore_errors=True)
        return result


def _adapt(
    index: SearchIndex,
    out: Path,
    run_dir: Path,
    resume_from: Path | None,
    config: AdaptConfig,
    progress: bool,
    note: Note,
) -> AdaptResult:
    started = time.perf_counter()
    # 1. Inputs.
    if not index.has_lexical:
        raise InputError(f"adapt distils the hybrid ranking: {index.no_lexical_reason()}")
    spec = check_model_for(index.meta, config.base_model)
    if spec.kind != "torch":
        raise InputError(f"{spec.path} is an ONNX folder: adapt needs the torch model (--base FOLDER)")
    if spec.pooling not in ("mean", "cls") or (spec.modules is not None and _has_dense(spec.modules)):
        raise InputError(
            f"{spec.path}: adapt saves mean or cls pooling without Dense layers, not {spec.pooling}"
        )
    # before the minutes of mining: `cuda` without a GPU, or fp16 on the CPU, fails here
    device = torch_device(config.device)
    dtype = resolve_precision(config.precision, device)
    dev_judged = None
    if config.dev_retrieval:
        from embedkit.evaluation.retrieval import RetrievalEvaluator

        dev_judged = RetrievalEvaluator(config.dev_retrieval, batch_size=64)

    # 2. Pseudo queries; the dev share is held out by document.
    if index.passages:  # the mining pairs each document with one vector
        raise InputError(f"adapt works on an index of whole documents; {index.path} holds passages")
    documents = [d for d in index.documents_at(range(len(index))) if d is not None]
    if len(documents) != len(index) or len(documents) < 3:
        raise InputError(f"the index {index.path} needs at least 3 documents in rows 0..n-1 to adapt on")
    train_queries, dev_queries = split_queries(
        make_pseudo_queries(documents, config.kinds, config.seed), config
    )
    made_from = _made_from(index, model_fingerprint(spec), train_queries, dev_queries, config)
    if resume_from is not None:
        check_adapt_resumable(resume_from, config, made_from)
    note(f"{len(train_queries):,} pseudo queries ({_by_kind(train_queries)}), {len(dev_queries):,} held out")

    # 3. The teacher's candidates.
    word_sets = {row: set(words(doc.full_text)) for row, doc in enumerate(documents)}
    mined = teacher_candidates(index, train_queries, word_sets, config, progress)
    dev_copies = [near_duplicates(q.source, range(len(documents)), word_sets) for q in dev_queries]

    # 4. The student.
    torch.manual_seed(config.seed)
    student = TorchEncoder(spec, device=str(device))
    optimizer = make_optimizer(student.model, config)
    parts = AdaptParts(
        model=student.model,
        optimizer=optimizer,
        scheduler=make_scheduler(optimizer, config.steps, config.warmup_ratio),
        scaler=torch.amp.GradScaler(device.type) if dtype == torch.float16 else None,
        sampler=random.Random(config.seed),
        doc_vectors=torch.from_numpy(index.vectors_of_rows(list(range(len(index))))).to(device),
    )
    embed = StudentEmbedder(student, dtype)
    texts = [d.full_text for d in documents]
    dev = DevSet(dev_queries, dev_copies, texts, config, dev_judged)

    def evaluate(refresh: bool) -> dict[str, float]:
        """Every dev signal's score by label (`signals`); the judged one when given."""
        if refresh:
            parts.doc_vectors = torch.from_numpy(embed.inference(texts, spec.max_seq_length, progress)).to(
                device
            )
        return dev.scores(embed, parts.doc_vectors.cpu().numpy())

    dev.remember_base(embed, parts.doc_vectors.cpu().numpy())  # the student is still the base here
    if resume_from is not None:
        state = load_adapt_checkpoint(resume_from, parts)
        note(f"resumed from step {state.step}")
    else:
        base = evaluate(refresh=False)
        state = AdaptState(0, SIGNALS[config.selection], base)
        note(f"base model: {state.selection} {base[state.selection]:.4f}")
    resumed_from = state.step if resume_from is not None else None

    # 5. The steps.
    batches = _endless_batches([q.source for q in train_queries], config)
    for _ in range(state.step):  # the order is a function of (seed, epoch): skip what was done
        next(batches)
    with ProgressBar(config.steps, "adapting", enabled=progress, completed=state.step) as bar:
        for step in range(state.step + 1, config.steps + 1):
            rows = next(batches)
            student.model.train()
            loss, terms = step_loss(
                embed,
                [train_queries[i] for i in rows],
                [mined[i] for i in rows],
                parts.doc_vectors,
                config,
                parts.sampler,
            )
            if not math.isfinite(loss.item()):
                raise RunFailure(f"the loss became {loss.item()} at step {step}; try a lower --lr")
            optimizer_step(
                loss, student.model, optimizer, parts.scheduler, parts.scaler, config.max_grad_norm
            )
            state.step = step
            bar.advance()
            bar.update(status=" ".join(f"{k} {v:.4f}" for k, v in terms.items()))
            if step % config.eval_steps == 0 or step == config.steps:
                scores = evaluate(refresh=True)
                state.history.append((step, scores))
                if scores[state.selection] > state.best:
                    state.best_scores, state.best_step = scores, step
                    save_adapt_best(run_dir, student.model, step, scores)
                best = " (best so far)" if state.best_step == step else ""
                note(f"step {step}: {state.selection} {scores[state.selection]:.4f}{best}")
                if step < config.steps:
                    save_adapt_checkpoint(run_dir, parts, state, made_from)

    # 6. The model folder: the best step's weights if they clear the margin (`signals.kept_step`),
    #    else the base's.
    rule = (config.selection, config.margin, config.min_base_overlap, config.force)
    kept = kept_step(state.history, state.base_scores, *rule)
    if kept is not None:
        load_adapt_best(run_dir, student.model, kept)
        adapted_scores = dict(state.history)[kept]
    else:
        note(f"no step gained {100 * config.margin:.2f} on {state.selection}: the output is the base model")
        student.model.load_state_dict({k: v for k, v in _base_state(spec.path).items()})
        adapted_scores = dict(state.base_scores)
    seconds = time.perf_counter() - started
    metadata = {
        "method": f"adapt {config.method}",
        "adapt": {
            "config": config.to_dict(),
            "index": str(index.path),
            "made_from": made_from,
            "queries": _by_kind(train_queries),
            "dev": {
                "label": state.selection,
                "margin": config.margin,
                "base_scores": state.base_scores,
                "adapted_scores": adapted_scores,
                "best_step": kept,
                "history": [{"step": st, **sc} for st, sc in state.history],
            },
            "seconds": round(seconds, 3),
            "resumed_from": resumed_from,
        },
        "base_model": {"path": str(spec.path), "fingerprint": model_fingerprint(spec)},
    }
    write_model_folder(out, student.model, spec.path, spec.pooling, spec.max_seq_length, metadata)
    counts = {k: sum(q.kind == k for q in train_queries) for k in config.kinds}
    return AdaptResult(
        out,
        config.steps,
        counts,
        state.selection,
        state.base_scores,
        adapted_scores,
        kept,
        seconds,
        resumed_from,
        config.margin,
        config.force,
        tuple(state.history),
    )


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
            "count": len(index),
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


def _endless_batches(sources: list[int], config: AdaptConfig):
    epoch = 0
    while True:
        yield from unique_source_batches(sources, config.batch_size, config.seed, epoch)
        epoch += 1


def _by_kind(queries: Sequence[PseudoQuery]) -> str:
    kinds: dict[str, int] = {}
    for q in queries:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    return ", ".join(f"{n:,} {k}" for k, n in kinds.items())


def _has_dense(modules: object) -> bool:
    from embedkit.encode.st_modules import DenseLayer

    return any(isinstance(step, DenseLayer) for step in getattr(modules, "steps", ()))


def _base_state(path: Path) -> dict[str, torch.Tensor]:
    from embedkit.encode.torch_backend import load_backbone

    return load_backbone(path).state_dict()


__all__ = ["AdaptResult", "adapt", "split_queries", "step_loss", "teacher_candidates"]
