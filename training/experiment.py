"""The low-shot experiment of miCSE (Klein & Nabi 2023, Table 2 and Fig. 3/4) on the user's own corpus.

For every training-set size N, seed s and method: draw N sentences with seed s, train (training
seed s too), evaluate, and keep only the scores; plus one row for the untrained base model. Each
finished run is written atomically to `OUT/runs/<name>.json` before its model is deleted, and a
finished run is never redone, so a killed experiment resumes where it stopped (a run killed while
training continues from its last checkpoint). `OUT/experiment.json` pins the settings: rerunning
into the same folder with other settings is refused, as mixing them would corrupt the table.

With pseudo queries (`embedkit.evaluation.pseudo_queries`), the query set is built once from the whole
corpus and its query sentences are removed from the pool that every subset is drawn from.

The two reference settings (all-MiniLM-L6-v2; see `embedkit experiment --help`)::

    embedkit experiment ../shared/data/corpora/wiki1m-sample.txt --out runs/wiki-cls \
        --sizes 1000,4000 --seeds 3 --methods simcse,ami-simcse,moco-simcse,micse --pooling cls \
        --eval-sts ../shared/data/sts/stsb-dev.tsv --eval-sts ../shared/data/sts/stsb-test.tsv \
        -t max_steps=1000000  # one full epoch, as the paper
    embedkit experiment ../shared/data/cranfield --split-sentences --out runs/cranfield \
        --sizes 1000,4000 --seeds 3 --methods simcse,ami-simcse,moco-simcse,micse \
        --eval-retrieval ../shared/data/cranfield --eval-sts ../shared/data/sts/stsb-test.tsv --eval-pseudo
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedkit.data.corpus import load_sentences, read_documents
from embedkit.encode.devices import torch_device
from embedkit.encode.identity import model_fingerprint
from embedkit.encode.model_folder import read_json, read_model_spec
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.errors import InputError
from embedkit.evaluation.pseudo_queries import (
    DEFAULT_QUERIES,
    PseudoQuerySet,
    build_pseudo_queries,
)
from embedkit.report.tables import BASE_METHOD, ExperimentTable, RunRecord, aggregate
from embedkit.storage.atomic import write_json_atomic
from embedkit.storage.locking import locked
from embedkit.training.batches import steps_per_epoch
from embedkit.training.config import METHODS, TrainConfig
from embedkit.training.experiment_evaluations import Evaluations
from embedkit.training.experiment_manifest import MANIFEST, check_manifest, settings_key  # noqa: F401
from embedkit.training.model import resolve_pooling
from embedkit.training.trainer import train
from embedkit.training.views import sample_pairs

# TrainConfig fields the experiment sets for each run; a --train-option for them is refused.
RESERVED = {"method": "--methods", "seed": "--seeds", "limit": "--sizes", "limit_seed": "--seeds"}

Notify = Callable[[str], None]


@dataclass
class ExperimentConfig:
    """What to run; the per-run training settings are `train` (a `TrainConfig`)."""

    sizes: tuple[int, ...] = (1000, 4000)  # training sentences per run: two low-shot budgets
    seeds: tuple[int, ...] = (0, 1, 2)  # three seeds; each draws its own subset
    methods: tuple[str, ...] = ("simcse", "micse")  # miCSE Table 3's baseline and full method
    eval_sts: tuple[str, ...] = ()  # STS files (sentence1, sentence2, score), e.g. STS-B dev and test
    eval_retrieval: tuple[str, ...] = ()  # BEIR folders, scored by nDCG@10
    # STS files scored by the seed papers' in-domain retrieval protocol (InfoCSE Table 11, R@1/5/10)
    eval_sts_retrieval: tuple[str, ...] = ()
    eval_pseudo: bool = False  # label-free retrieval on pseudo queries cut from the corpus
    pseudo_queries: int = DEFAULT_QUERIES  # pseudo queries drawn (fewer if fewer documents qualify)
    pseudo_seed: int = 0  # fixes the pseudo-query draw, the same for every run
    include_base: bool = True  # the untrained base model's row (the paper's "no training" line)
    train: TrainConfig = field(default_factory=TrainConfig)  # base model, pooling, lr, steps, ...

    def validate(self) -> ExperimentConfig:
        if not self.sizes or any(n < 2 for n in self.sizes):
            raise InputError(f"sizes must be at least 2 sentences each, got {list(self.sizes)}")
        if len(set(self.sizes)) != len(self.sizes) or len(set(self.seeds)) != len(self.seeds):
            raise InputError("sizes and seeds must not repeat")
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise InputError(f"seeds must be non-negative integers, got {list(self.seeds)}")
        unknown = [m for m in self.methods if m not in METHODS]
        if not self.methods or unknown:
            raise InputError(f"unknown method {', '.join(unknown) or '(none)'}: use {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise InputError("methods must not repeat")
        if not (self.eval_sts or self.eval_retrieval or self.eval_pseudo or self.eval_sts_retrieval):
            raise InputError(
                "nothing to evaluate: give --eval-sts, --eval-retrieval, --eval-sts-retrieval "
                "or --eval-pseudo"
            )
        self.train.validate()
        return self


def train_config_from_options(options: Sequence[str], base: TrainConfig | None = None) -> TrainConfig:
    """`KEY=VALUE` options parsed by each `TrainConfig` field's type; reserved keys are refused."""
    config = (base or TrainConfig()).with_overrides(options)
    for option in options:
        key = option.partition("=")[0].strip().replace("-", "_")
        if key in RESERVED:
            raise InputError(f"{key} is set by the experiment for each run: use {RESERVED[key]} instead")
    if config.dev_pseudo:
        raise InputError(
            "dev_pseudo needs documents, and experiment runs train on drawn sentence subsets: "
            "use --eval-pseudo to score every run on pseudo queries"
        )
    return config


def run_name(method: str, size: int, seed: int) -> str:
    return f"{method}-n{size}-s{seed}"


@dataclass
class ExperimentResult:
    records: list[RunRecord]
    table: ExperimentTable
    trained: list[str]  # runs done by this call
    reused: list[str]  # runs found finished in OUT/runs


def prepare_pool(corpus: str | Path, config: ExperimentConfig) -> tuple[list[str], PseudoQuerySet | None]:
    """The texts every subset is drawn from, and the pseudo queries (kept out of that pool).

    Sentences for dropout views; whole documents for crop and ict (their query sentences cut out),
    from which each run draws its pairs.
    """
    column, split = config.train.column, config.train.split_sentences
    if config.train.views != "dropout":
        documents = list(read_documents(corpus, column))
        if not config.eval_pseudo:
            return [d.full_text for d in documents], None
        pseudo = build_pseudo_queries(documents, config.pseudo_queries, config.pseudo_seed)
        texts = {d.id: d.full_text for d in documents}
        for query in pseudo.queries:
            texts[query.doc_id] = texts[query.doc_id].replace(query.text, " ")
        return list(texts.values()), pseudo
    if not config.eval_pseudo:
        return load_sentences(corpus, column, split).sentences, None
    documents = list(read_documents(corpus, column))
    pseudo = build_pseudo_queries(documents, config.pseudo_queries, config.pseudo_seed)
    sentences = load_sentences([d.full_text for d in documents], split_sentences=split).sentences
    kept, _ = pseudo.exclude(sentences)
    return kept, pseudo


@locked("out_dir")
def run_experiment(
    corpus: str | Path,
    out_dir: str | Path,
    config: ExperimentConfig | None = None,
    *,
    progress: bool = True,
    notify: Notify | None = None,
) -> ExperimentResult:
    """Run (or resume) the whole grid into `out_dir` and return the records and the table.

    `notify(line)` receives one line per finished run. The Markdown/CSV/JSON table and the plots
    are written by the caller (`embedkit.report.tables.write_reports`, `embedkit.report.plots.write_plots`).
    """
    config = (config or ExperimentConfig()).validate()
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder")
    # 1. Everything is read and checked before the first run: data, evaluations, the base model.
    pool, pseudo = prepare_pool(corpus, config)
    if config.train.views == "dropout" and max(config.sizes) > len(pool):
        raise InputError(
            f"the corpus gives {len(pool):,} training sentences, fewer than the size {max(config.sizes):,}"
        )
    sets = (config.eval_sts, config.eval_retrieval, config.eval_sts_retrieval)
    evaluations = Evaluations(*sets, pseudo, config.train.eval_batch_size)
    torch_device(config.train.device)  # `--device cuda` without a GPU fails here, before any write
    config.train.validate()
    base_spec = read_model_spec(config.train.base_model)
    if base_spec.kind != "torch":
        raise InputError(f"--base {base_spec.path} is an ONNX folder: training needs the torch model")
    key = _settings_key(out, config, pool, base_spec.path, evaluations)
    if pseudo is not None:
        write_json_atomic(out / "pseudo-queries.json", pseudo.to_json())

    # 2. The plan; finished runs are read back, the others run in order, each saved when done.
    records: list[RunRecord] = []
    trained: list[str] = []
    reused: list[str] = []
    plan = plan_runs(config)
    bar = _RunBar(len(plan), progress)
    try:
        for run in plan:
            record = _finished_record(out / "runs" / f"{run.name}.json", key)
            if record is not None:
                records.append(record)
                reused.append(run.name)
                bar.advance()
                continue
            record = _run_and_record(run, out, config, pool, evaluations, base_spec.path, key, bar)
            records.append(record)
            trained.append(run.name)
            bar.advance()
            if notify is not None:
                scores = ", ".join(f"{k} {v:.2f}" for k, v in record.metrics.items())
                notify(f"{run.name}: {scores} ({record.wall_s:.0f}s)")
    finally:
        bar.stop()
    return ExperimentResult(records, aggregate(records, config.methods), trained, reused)


def _settings_key(
    out: Path, config: ExperimentConfig, pool: list[str], base_path: Path, evaluations: Evaluations
) -> str:
    """What every run of the grid shares (data, base model, settings, evaluations), checked against
    the manifest of an experiment already in `out`; the key its run records carry."""
    run_fields = set(RESERVED) | {"column", "split_sentences"} | set(TrainConfig.RESUMABLE_CHANGES)
    settings = {
        "pool": load_sentences(pool).fingerprint,
        "base_model": model_fingerprint(base_path),
        "train": {k: v for k, v in config.train.to_dict().items() if k not in run_fields},
        "evaluations": evaluations.describe(),
    }
    out.mkdir(parents=True, exist_ok=True)
    return check_manifest(out, settings)


def _finished_record(record_path: Path, key: str) -> RunRecord | None:
    """The record of a run finished with the same settings, or None."""
    if not record_path.is_file():
        return None
    record = RunRecord.from_json(read_json(record_path), str(record_path))
    return record if record.settings == key else None


def _run_and_record(
    run: PlannedRun,
    out: Path,
    config: ExperimentConfig,
    pool: list[str],
    evaluations: Evaluations,
    base_path: Path,
    key: str,
    bar: _RunBar,
) -> RunRecord:
    """Evaluate the base or train and evaluate one run; its record, written before its model is dropped."""
    bar.start_run(run.name)
    started = time.perf_counter()
    if run.method == BASE_METHOD:
        pooling = resolve_pooling(config.train.pooling, base_path)
        encoder = TorchEncoder(base_path, device=config.train.device, pooling=pooling)
        metrics, details = evaluations(encoder)
        train_info: dict[str, Any] = {}
    else:
        model_dir = out / "tmp" / run.name
        metrics, details, train_info = _train_and_evaluate(
            pool, model_dir, config.train, run, evaluations, bar
        )
    record = RunRecord(run.name, run.method, run.size, run.seed, metrics, details, train_info, key)
    record.wall_s = round(time.perf_counter() - started, 3)
    write_json_atomic(out / "runs" / f"{run.name}.json", record.to_json())
    shutil.rmtree(out / "tmp" / run.name, ignore_errors=True)  # the scores are safe: drop the model
    return record


@dataclass(frozen=True)
class PlannedRun:
    name: str
    method: str  # a training method, or "base" for the untrained model
    size: int | None = None
    seed: int | None = None


def plan_runs(config: ExperimentConfig) -> list[PlannedRun]:
    """The base row first, then by size, seed and method (every method of a subset in a row)."""
    plan = [PlannedRun(BASE_METHOD, BASE_METHOD)] if config.include_base else []
    for size in config.sizes:
        for seed in config.seeds:
            plan += [PlannedRun(run_name(m, size, seed), m, size, seed) for m in config.methods]
    return plan


def _train_and_evaluate(
    pool: list[str],
    model_dir: Path,
    base: TrainConfig,
    run: PlannedRun,
    evaluations: Evaluations,
    bar: _RunBar,
) -> tuple[dict[str, float], dict[str, Any], dict[str, Any]]:
    """Train one run into `model_dir` (resuming a killed one), evaluate it; the caller deletes it."""
    size, seed = int(run.size or 0), int(run.seed or 0)
    if base.views == "dropout":
        subset = load_sentences(pool, limit=size, seed=seed)
        texts, limit, fingerprint = subset.sentences, None, subset.fingerprint
    else:  # document views: the run draws `size` pairs from all documents with its seed
        texts, limit = pool, size
        fingerprint = sample_pairs(pool, base.views, size, seed).fingerprint
    config = dataclasses.replace(
        base, method=run.method, seed=seed, limit=limit, limit_seed=seed, column=None, split_sentences=False
    )
    info: dict[str, Any] = {"subset_fingerprint": fingerprint}
    total = min(config.epochs * steps_per_epoch(size, config.batch_size), config.max_steps or 1 << 62)
    if _finished_model(model_dir, config, fingerprint):
        info["reused_model"] = True  # killed after training, before its scores were written
    else:
        result = train(
            texts,
            model_dir,
            config,
            progress=False,
            resume=True,
            overwrite=True,
            on_step=lambda step, terms: bar.step(step, total, terms),
        )
        info |= {
            "steps": result.steps,
            "sentences": result.sentences,
            "seconds": round(result.seconds, 3),
            "dev_score": result.dev_score,
            "base_dev_score": result.base_dev_score,
            "best_step": result.best_step,
            "worse_than_base": result.worse_than_base,
            "final_losses": result.final_losses,
        }
    encoder = TorchEncoder(model_dir, device=config.device)
    metrics, details = evaluations(encoder)
    del encoder
    return metrics, details, info


def _finished_model(model_dir: Path, config: TrainConfig, data_fingerprint: str) -> bool:
    meta_path = model_dir / "embedkit.json"
    if not meta_path.is_file() or (model_dir / "checkpoints").exists():
        return False
    meta = read_json(meta_path)
    training = meta.get("training") or {}
    return (meta.get("data") or {}).get("fingerprint") == data_fingerprint and training.get(
        "config"
    ) == json.loads(json.dumps(config.to_dict()))


class _RunBar:
    """One bar over all runs; its status shows the current run and its training step."""

    def __init__(self, total: int, enabled: bool) -> None:
        from embedkit.progress import ProgressBar

        self.bar = ProgressBar(total, "runs", enabled=enabled, elapsed=True)
        self.bar.start()
        self.name = ""

    def start_run(self, name: str) -> None:
        self.name = name
        self.bar.update(status=name)

    def step(self, step: int, total: int, terms: dict[str, float]) -> None:
        loss = terms.get("loss")
        text = f"{self.name}: step {step}/{total}" + (f", loss {loss:.4f}" if loss is not None else "")
        self.bar.update(status=text)

    def advance(self) -> None:
        self.bar.advance()

    def stop(self) -> None:
        self.bar.stop()
