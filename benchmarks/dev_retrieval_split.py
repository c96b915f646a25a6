"""How checkpoint selection on a few judged queries (`embedkit train --dev-retrieval`) carries over
to queries it never saw.

The judged queries of a BEIR folder are split at random into a selection half (`--select`
queries, 30 by default) and a held-out half (the rest), `--splits` times. One training run
(`embedkit.training.train` with `dev_retrieval` = split 0's selection folder) scores the base and
every `--eval-steps` checkpoint; the scorer is the real `RetrievalEvaluator`, run over all judged
queries so that each checkpoint's per-query nDCG@10 is kept. Split 0's selection is the
trainer's own (its kept step and model folder); the other splits apply the trainer's rule to the
same checkpoints: the first best selection-half score, or the base when no checkpoint beats it.
Each held-out half is scored only for what was selected on its own selection half.

The training trajectory does not depend on the dev queries (selection only reads scores), so one
run serves every split. The check that this holds: the model folder the trainer wrote is scored on
split 0's held-out half and must equal the recorded score of the step it kept.

    python benchmarks/dev_retrieval_split.py ../shared/data/cranfield --views crop --method simcse \
        --limit 1000 --seed 0 --json split.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import embedkit.training.trainer as trainer_module
from embedkit.data.beir import read_beir
from embedkit.encode.torch_backend import TorchEncoder
from embedkit.evaluation.retrieval import RetrievalEvaluator
from embedkit.training import TrainConfig, train
from embedkit.training.save import beats_base

METRIC = "ndcg@10"


def write_subset(beir_dir: Path, query_ids: list[str], out: Path) -> Path:
    """A BEIR folder with `beir_dir`'s corpus and only `query_ids` and their judgments."""
    data = read_beir(beir_dir)
    (out / "qrels").mkdir(parents=True)
    (out / "corpus.jsonl").symlink_to((beir_dir / "corpus.jsonl").resolve())
    keep = set(query_ids)
    with (out / "queries.jsonl").open("w") as handle:
        for qid in query_ids:
            handle.write(json.dumps({"_id": qid, "text": data.queries[qid]}) + "\n")
    with (out / "qrels" / "test.tsv").open("w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for qid, judged in data.qrels.items():
            if qid in keep:
                for doc, grade in judged.items():
                    handle.write(f"{qid}\t{doc}\t{grade}\n")
    return out


class RecordingEvaluator:
    """The dev evaluator the trainer selects on: the mean nDCG@10 over the selection queries; every
    call also keeps each judged query's nDCG@10, in call order (the base first)."""

    name = "retrieval"
    primary_metric = METRIC
    greater_is_better = True

    def __init__(self, full: RetrievalEvaluator, select: list[str]) -> None:
        self.full, self.select, self.history = full, select, []

    def __call__(self, encoder: Any) -> dict[str, float]:
        per_query = {q: m[METRIC] for q, m in self.full.evaluate(encoder).per_query.items()}
        self.history.append(per_query)
        return {METRIC: statistics.fmean(per_query[q] for q in self.select)}

    def describe(self) -> dict[str, Any]:
        return {"selection_queries": len(self.select), **self.full.describe()}


def mean_over(scores: dict[str, float], queries: list[str]) -> float:
    return statistics.fmean(scores[q] for q in queries)


def choose(select_scores: list[float]) -> int:
    """The trainer's rule: the first checkpoint with the best score, or the base (0) if none beats it."""
    best = None
    for index, score in enumerate(select_scores[1:], 1):
        if best is None or score > select_scores[best]:
            best = index
    best_score = None if best is None else select_scores[best]
    return best if best is not None and beats_base(best_score, select_scores[0]) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("beir_dir", type=Path)
    parser.add_argument("--base", default=None, help="base model folder (default: the bundled one)")
    parser.add_argument("--views", default="crop")
    parser.add_argument("--method", default="simcse")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--eval-steps", type=int, default=4)
    parser.add_argument("--select", type=int, default=30, help="judged queries that select")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    judged = sorted(read_beir(args.beir_dir).qrels)
    splits = []
    for s in range(args.splits):
        order = judged[:]
        random.Random(args.split_seed * 1000 + s).shuffle(order)
        splits.append((sorted(order[: args.select]), sorted(order[args.select :])))
    for select, held_out in splits:
        assert not set(select) & set(held_out)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        select_dir = write_subset(args.beir_dir, splits[0][0], work / "select-0")
        recorder = RecordingEvaluator(RetrievalEvaluator(args.beir_dir, mode="dense"), splits[0][0])
        trainer_module.dev_evaluator = lambda config, corpus: recorder  # the real one reads select-0
        config = TrainConfig(
            base_model=args.base,
            method=args.method,
            views=args.views,
            limit=args.limit,
            limit_seed=args.seed,
            seed=args.seed,
            learning_rate=args.learning_rate,
            max_steps=None,
            dev_retrieval=str(select_dir),
            eval_steps=args.eval_steps,
            device=args.device,
        )
        started = time.perf_counter()
        result = train(args.beir_dir, work / "model", config, progress=False)
        seconds = time.perf_counter() - started
        steps = [0] + [s for s in range(args.eval_steps, result.steps + 1, args.eval_steps)]
        if steps[-1] != result.steps:
            steps.append(result.steps)
        if len(steps) != len(recorder.history):
            raise SystemExit(f"{len(recorder.history)} evaluations for steps {steps}")
        dense = RetrievalEvaluator(args.beir_dir, mode="dense")
        saved = dense.evaluate(TorchEncoder(work / "model", device=args.device))
        folder_held_out = mean_over({q: m[METRIC] for q, m in saved.per_query.items()}, splits[0][1])

    rows = []
    for s, (select, held_out) in enumerate(splits):
        select_scores = [mean_over(h, select) for h in recorder.history]
        held = [mean_over(h, held_out) for h in recorder.history]
        chosen = choose(select_scores)
        rows.append(
            {
                "split": s,
                "select_queries": len(select),
                "held_out_queries": len(held_out),
                "selected_step": steps[chosen],
                "select_scores": dict(zip(map(str, steps), select_scores, strict=True)),
                "held_out_scores": dict(zip(map(str, steps), held, strict=True)),
                "held_out_base": held[0],
                "held_out_fixed_budget": held[-1],
                "held_out_selected": held[chosen],
            }
        )
    trainer_step = 0 if result.kept_base else result.best_step
    report = {
        "benchmark": "dev_retrieval_split",
        "beir_dir": str(args.beir_dir),
        "settings": {k: v for k, v in vars(args).items() if k not in ("beir_dir", "json")},
        "train_seconds_with_evaluations": round(seconds, 1),
        "checkpoint_steps": steps,
        "trainer_kept_step_split0": trainer_step,
        "rule_matches_trainer_split0": rows[0]["selected_step"] == trainer_step,
        "model_folder_held_out_split0": folder_held_out,
        "splits": rows,
        "mean": {
            key: statistics.fmean(r[key] for r in rows)
            for key in ("held_out_base", "held_out_fixed_budget", "held_out_selected")
        },
    }
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
