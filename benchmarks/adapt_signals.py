"""Which label-free dev signal tracks judged retrieval across `embedkit adapt`'s steps and settings.

One adapt run per (collection, setting) with every dev signal recorded at each evaluation
(`embedkit.training.adapt.signals`: held-out pseudo queries as cut, the same without their rare words,
the share of the base model's top 10 kept) beside the judged queries' dense nDCG@10 (the BEIR
folder's test qrels: used here to measure the signals, never to select). Then, for each signal and
rule (margin over the base, minimum base overlap), the step the rule keeps and the judged change it
brings: a rule is safe when it never keeps a step that is worse on judged queries than the base.

    python benchmarks/adapt_signals.py --collection cranfield --lr 1e-5 --work /tmp/adapt-signals
    python benchmarks/adapt_signals.py --analyse /tmp/adapt-signals/*.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MARGINS = (0.0, 0.005, 0.01, 0.02, 0.025, 0.03)
OVERLAPS = (0.0, 0.6, 0.8)


def run(collection: str, work: Path, lr: float, steps: int, eval_steps: int, seed: int) -> Path:
    from embedkit.training.adapt.config import AdaptConfig
    from embedkit.training.adapt.run import adapt

    beir = DATA / collection
    index = work / f"index-{collection}"
    if not (index / "CURRENT").exists():
        subprocess.run(
            [sys.executable, "-m", "embedkit.cli", "index", str(beir), "--out", str(index)], check=True
        )
    config = AdaptConfig(
        select="pseudo",
        force=True,
        margin=0.0,
        dev_retrieval=str(beir),
        learning_rate=lr,
        steps=steps,
        eval_steps=eval_steps,
        seed=seed,
    )
    started = time.perf_counter()
    result = adapt(
        index,
        work / f"m-{collection}-lr{lr:g}-s{seed}",
        config,
        overwrite=True,
        progress=False,
        note=lambda text: print(text, flush=True),
    )
    out = work / f"signals-{collection}-lr{lr:g}-s{seed}.json"
    out.write_text(
        json.dumps(
            {
                "collection": collection,
                "lr": lr,
                "seed": seed,
                "steps": steps,
                "eval_steps": eval_steps,
                "seconds": round(time.perf_counter() - started, 1),
                "base": result.base_scores,
                "history": [{"step": step, **scores} for step, scores in result.history],
            },
            indent=2,
        )
        + "\n"
    )
    return out


def analyse(paths: list[Path]) -> None:
    from embedkit.training.adapt.signals import LABEL_FREE, SIGNALS, kept_step

    runs = [json.loads(p.read_text()) for p in paths]
    judged = SIGNALS["judged"]
    print(
        "runs: "
        + "; ".join(
            f"{r['collection']} lr {r['lr']:g} seed {r['seed']}: "
            f"judged base {100 * r['base'][judged]:.2f}, steps "
            + ", ".join(f"{h['step']}: {100 * (h[judged] - r['base'][judged]):+.2f}" for h in r["history"])
            for r in runs
        )
    )
    print("\nper step: signal change vs judged change (x100)")
    for r in runs:
        for h in r["history"]:
            row = "  ".join(
                f"{k} {100 * (h[SIGNALS[k]] - r['base'][SIGNALS[k]]):+6.2f}"
                for k in (*LABEL_FREE, "base-overlap")
            )
            print(
                f"  {r['collection']:<11} lr {r['lr']:<6g} s{r['seed']} step {h['step']:>4}: {row}  "
                f"judged {100 * (h[judged] - r['base'][judged]):+6.2f}"
            )
    print("\nrule -> judged change of the kept model per run (0: base kept); worst; safe")
    for signal in LABEL_FREE:
        for margin in MARGINS:
            for overlap in OVERLAPS:
                changes = []
                for r in runs:
                    history = [(h["step"], h) for h in r["history"]]
                    step = kept_step(history, r["base"], signal, margin, overlap)
                    changes.append(0.0 if step is None else dict(history)[step][judged] - r["base"][judged])
                worst = min(changes)
                print(
                    f"  {signal:<8} margin {margin:.3f} overlap {overlap:.1f}: "
                    + " ".join(f"{100 * c:+6.2f}" for c in changes)
                    + f"  worst {100 * worst:+.2f}  {'safe' if worst >= -0.003 else 'HARMS'}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collection", choices=("cranfield", "msmarco-5k"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/adapt-signals"))
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval-steps", type=int, default=25)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--analyse", type=Path, nargs="*")
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    print(run(args.collection, args.work, args.lr, args.steps, args.eval_steps, args.seed))


if __name__ == "__main__":
    main()
