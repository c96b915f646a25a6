"""`embedkit adapt INDEX`: distil the index's hybrid ranking into its dense model, label-free.

Read top to bottom:
1. Check the inputs (the index has a lexical side, its model is a torch folder this code can save).
2. Pseudo queries from the index's own documents (`adapt_queries`), a held-out share for dev.
3. The teacher: the index's hybrid ranking of every query (`SearchIndex.search_text`), mined into
   each query's candidate list and hard negatives.
4. The student, the dense encoder (backbone + the model's pooling), trained on the query side:
   listwise KL to the teacher's distribution over the candidates (`distill_losses.listwise_kl`),
   plus InfoNCE over in-batch positives and hard negatives (`losses.info_nce`). Each query's positive
   (its document, without the ICT sentence or title) is embedded every step by the current model
   without gradient; the other candidates' vectors start as the index's own and are embedded again
   by the current model at every dev evaluation (ANCE's refreshed negatives, Xiong et al. 2021).
5. Every `eval_steps` the dev score (held-out pseudo queries' nDCG@10, or judged queries with
   `dev_retrieval`); the best weights, or the base when nothing beat it, become the model folder.
The caller (`embedkit adapt`) then re-embeds the index with it (`embedkit.index.reembed`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from embedkit.encode.torch_backend import TorchEncoder
from embedkit.errors import InputError, RunFailure
from embedkit.index.folder import check_model_for
from embedkit.index.search import SearchIndex
from embedkit.progress import ProgressBar
from embedkit.storage.locking import write_lock
from embedkit.training.adapt_config import AdaptConfig
from embedkit.training.adapt_queries import (
    HARD_NEGATIVE_RANKS,
    Candidates,
    PseudoQuery,
    make_pseudo_queries,
    mine_candidates,
    near_duplicates,
    unique_source_batches,
    words,
)
from embedkit.training.distill_losses import candidate_cosines, listwise_kl
from embedkit.training.losses import info_nce
from embedkit.training.model import make_optimizer, make_scheduler, optimizer_step
from embedkit.training.save import write_model_folder
from embedkit.training.trainer import autocast, pad_batch, resolve_precision

HARD_NEGATIVES_PER_QUERY = 4  # InfoNCE's extra negatives per query, drawn from its hard negatives
TEACHER_CHUNK = 128  # queries per hybrid search call (one progress-bar tick)
Note = Callable[[str], None]


@dataclass(frozen=True)
class AdaptResult:
    """What an adapt run produced."""

    out_dir: Path
    steps: int
    queries: dict[str, int]  # training queries by kind
    dev_label: str  # e.g. "dev pseudo ndcg@10"
    base_dev_score: float
    best_dev_score: float
    best_step: int | None  # None: no step beat the base, the base was saved
    seconds: float

    @property
    def kept_base(self) -> bool:
        return self.best_step is None


def adapt(
    index_path: str | Path,
    out_dir: str | Path,
    config: AdaptConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    note: Note = lambda text: None,
) -> AdaptResult:
    """Adapt the dense model of the index in `index_path` to its documents; write the model to `out_dir`.

    Raises `InputError` for bad input (before anything is written) and `RunFailure` when the loss
    stops being finite. The index itself is not changed here (see `embedkit.index.reembed`).
    """
    config = (config or AdaptConfig()).validate()
    out = Path(out_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise InputError(f"--out {out} is not empty: choose another folder or pass --overwrite")
    with write_lock(out), SearchIndex.load(index_path) as index:
        return _adapt(index, out, config, progress, note)


def _adapt(index: SearchIndex, out: Path, config: AdaptConfig, progress: bool, note: Note) -> AdaptResult:
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
    dev_judged = None
    if config.dev_retrieval:
        from embedkit.evaluation.retrieval import RetrievalEvaluator

        dev_judged = RetrievalEvaluator(config.dev_retrieval, batch_size=64)

    # 2. Pseudo queries; the dev share is held out by document.
    documents = [d for d in index.store.by_rows(range(len(index))) if d is not None]
    if len(documents) != len(index) or len(documents) < 3:
        raise InputError(f"the index {index.path} needs at least 3 documents in rows 0..n-1 to adapt on")
    train_queries, dev_queries = split_queries(
        make_pseudo_queries(documents, config.kinds, config.seed), config
    )
    note(f"{len(train_queries):,} pseudo queries ({_by_kind(train_queries)}), {len(dev_queries):,} held out")

    # 3. The teacher's candidates.
    word_sets = {row: set(words(doc.full_text)) for row, doc in enumerate(documents)}
    mined = teacher_candidates(index, train_queries, word_sets, config, progress)
    dev_copies = [near_duplicates(q.source, range(len(documents)), word_sets) for q in dev_queries]

    # 4. The student.
    torch.manual_seed(config.seed)
    student = TorchEncoder(spec, device=config.device)
    device, dtype = student.device, resolve_precision(config.precision, student.device)
    doc_vectors = torch.from_numpy(index.vectors_of_rows(list(range(len(index))))).to(device)
    params = student.model
    optimizer = make_optimizer(params, config)
    scheduler = make_scheduler(optimizer, config.steps, config.warmup_ratio)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    embed = _Embedder(student, dtype)
    texts = [d.full_text for d in documents]

    def evaluate(refresh: bool) -> float:
        nonlocal doc_vectors
        if refresh:
            doc_vectors = torch.from_numpy(embed.inference(texts, spec.max_seq_length, progress)).to(device)
        if dev_judged is not None:
            student.model.eval()
            return float(dev_judged(student)["ndcg@10"])
        return dev_ndcg(embed, dev_queries, dev_copies, doc_vectors.cpu().numpy(), config)

    label = "dev retrieval ndcg@10" if dev_judged is not None else "dev pseudo ndcg@10"
    base_score = best_score = evaluate(refresh=False)
    best_state, best_step = None, None
    note(f"base model: {label} {base_score:.4f}")

    # 5. The steps.
    rng = random.Random(config.seed)
    batches = _endless_batches([q.source for q in train_queries], config)
    bar = ProgressBar(config.steps, "adapting", enabled=progress)
    with bar:
        for step in range(1, config.steps + 1):
            rows = next(batches)
            student.model.train()
            loss, terms = step_loss(
                embed, [train_queries[i] for i in rows], [mined[i] for i in rows], doc_vectors, config, rng
            )
            if not math.isfinite(loss.item()):
                raise RunFailure(f"the loss became {loss.item()} at step {step}; try a lower --lr")
            optimizer_step(loss, params, optimizer, scheduler, scaler, config.max_grad_norm)
            bar.advance()
            bar.update(status=" ".join(f"{k} {v:.4f}" for k, v in terms.items()))
            if step % config.eval_steps == 0 or step == config.steps:
                score = evaluate(refresh=True)
                if score > best_score:
                    best_score, best_step = score, step
                    best_state = {k: v.detach().cpu().clone() for k, v in student.model.state_dict().items()}
                note(f"step {step}: {label} {score:.4f}{' (best so far)' if best_step == step else ''}")

    # 6. The model folder: the best weights, or the base's when no step beat it.
    if best_state is not None:
        student.model.load_state_dict(best_state)
    else:
        note(f"no step beat the base model on {label}: the output is the base model")
        student.model.load_state_dict({k: v for k, v in _base_state(spec.path).items()})
    seconds = time.perf_counter() - started
    metadata = {
        "method": f"adapt {config.method}",
        "adapt": {
            "config": config.to_dict(),
            "index": str(index.path),
            "queries": _by_kind(train_queries),
            "dev": {
                "label": label,
                "base_score": base_score,
                "best_score": best_score,
                "best_step": best_step,
            },
            "seconds": round(seconds, 3),
        },
        "base_model": {"path": str(spec.path), "fingerprint": spec.fingerprint},
    }
    write_model_folder(out, student.model, spec.path, spec.pooling, spec.max_seq_length, metadata)
    counts = {k: sum(q.kind == k for q in train_queries) for k in config.kinds}
    return AdaptResult(out, config.steps, counts, label, base_score, best_score, best_step, seconds)


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


class _Embedder:
    """The student's sentence vectors: with gradient for queries, without for passages."""

    def __init__(self, student: TorchEncoder, dtype: torch.dtype | None) -> None:
        from embedkit.encode.batching import load_tokenizer, pad_token_id

        self.student, self.dtype = student, dtype
        self.tokenizers: dict[int, object] = {}
        self.pad_id = pad_token_id(student.path, load_tokenizer(student.path, student.max_seq_length))
        self._load_tokenizer = load_tokenizer

    def __call__(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """(B, D) vectors of `texts` cut at `max_length` tokens, in the model's current mode."""
        if max_length not in self.tokenizers:
            self.tokenizers[max_length] = self._load_tokenizer(self.student.path, max_length)
        encodings = self.tokenizers[max_length].encode_batch(list(texts))  # type: ignore[attr-defined]
        inputs = pad_batch(encodings, np.arange(len(texts)), self.pad_id, self.student.device)
        if not self.student.uses_token_type_ids:
            inputs.pop("token_type_ids")
        with autocast(self.student.device, self.dtype):
            hidden = self.student.model(**inputs).last_hidden_state
        return self.student.head(hidden, inputs["attention_mask"], True)

    @torch.no_grad()
    def inference(
        self, texts: Sequence[str], max_length: int, progress: bool = False, batch: int = 64
    ) -> np.ndarray:
        """Vectors in eval mode (no dropout), in order, longest first within the bar's batches."""
        model = self.student.model
        was_training = model.training
        model.eval()
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.student.dim), dtype=np.float32)
        try:
            with ProgressBar(
                len(texts), "refreshing vectors", enabled=progress and len(texts) > batch
            ) as bar:
                for start in range(0, len(order), batch):
                    rows = order[start : start + batch]
                    out[rows] = self([texts[i] for i in rows], max_length).float().cpu().numpy()
                    bar.advance(len(rows))
        finally:
            model.train(was_training)
        return out


def step_loss(
    embed: _Embedder,
    queries: Sequence[PseudoQuery],
    mined: Sequence[Candidates],
    doc_vectors: torch.Tensor,
    config: AdaptConfig,
    rng: random.Random,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One batch's loss: listwise KL over each query's candidates, plus InfoNCE with hard negatives."""
    device = doc_vectors.device
    q = embed([x.text for x in queries], config.query_max_length)  # (B, D), with gradient
    positives = torch.from_numpy(
        embed.inference([x.positive for x in queries], config.positive_max_length)
    ).to(device)
    # the candidates: slot 0 is the query's own positive (row N + i of the pool), then the teacher's hits
    width = max(len(m.rows) for m in mined)
    n = doc_vectors.shape[0]
    index = torch.zeros((len(queries), width), dtype=torch.long)
    teacher = torch.zeros((len(queries), width))
    mask = torch.zeros((len(queries), width), dtype=torch.bool)
    for i, m in enumerate(mined):
        index[i, : len(m.rows)] = torch.tensor([n + i, *m.rows[1:]])
        teacher[i, : len(m.rows)] = torch.tensor(m.scores)
        mask[i, : len(m.rows)] = True
    pool = torch.cat([doc_vectors, positives])
    student_scores = candidate_cosines(q, pool, index.to(device))
    kl = listwise_kl(
        student_scores, teacher.to(device), mask.to(device), config.temperature, config.teacher_temperature
    )
    terms = {"kl": kl.item()}
    loss = kl
    if config.nce_weight > 0:
        batch_sources = {x.source for x in queries}
        negatives = [
            r
            for m in mined
            for r in rng.sample(m.hard_negatives, min(HARD_NEGATIVES_PER_QUERY, len(m.hard_negatives)))
            if r not in batch_sources  # another query's positive is no negative
        ]
        nce = info_nce(q, positives, doc_vectors[negatives] if negatives else None, config.temperature)
        terms["nce"] = nce.item()
        loss = loss + config.nce_weight * nce
    return loss, terms


def dev_ndcg(
    embed: _Embedder,
    queries: Sequence[PseudoQuery],
    copies: Sequence[set[int]],
    doc_vectors: np.ndarray,
    config: AdaptConfig,
) -> float:
    """Mean nDCG@10 of held-out pseudo queries, each with one relevant target: its positive passage.

    The target competes with every other document's vector except its source's and its copies';
    with one relevant document nDCG@10 is 1 / log2(1 + rank) within the top 10, else 0.
    """
    if not queries:
        return 0.0
    q = embed.inference([x.text for x in queries], config.query_max_length)
    targets = embed.inference([x.positive for x in queries], config.positive_max_length)
    q /= np.linalg.norm(q, axis=1, keepdims=True).clip(1e-12)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True).clip(1e-12)
    scores = q @ doc_vectors.T  # (Q, N)
    total = 0.0
    for i, query in enumerate(queries):
        excluded = [query.source, *copies[i]]
        scores[i, excluded] = -np.inf
        rank = 1 + int((scores[i] > float(q[i] @ targets[i])).sum())
        total += 1.0 / math.log2(1 + rank) if rank <= 10 else 0.0
    return total / len(queries)


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


__all__ = ["AdaptResult", "adapt", "dev_ndcg", "split_queries", "step_loss", "teacher_candidates"]
