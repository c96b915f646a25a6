"""The README's picture: nDCG@10 of dense, lexical and hybrid search on several collections.

Reads the `--json` reports of `embedkit eval retrieval DIR --mode all` and draws them side by side
with `embedkit.report.plots.plot_modes`.

    embedkit eval retrieval ../shared/data/cranfield --mode all --json cranfield.json
    embedkit eval retrieval ../shared/data/msmarco-5k --mode all --json msmarco-5k.json
    python benchmarks/plot_hybrid.py cranfield.json msmarco-5k.json --out docs/hybrid.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from embedkit.report.plots import plot_modes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    scores = {}
    for path in args.reports:
        report = json.loads(path.read_text())
        name = Path(report["dataset"]).name
        label = f"{name} (hybrid: {report['fusion']})" if "fusion" in report else name
        scores[label] = {mode: metrics["ndcg@10"] for mode, metrics in report["metrics"].items()}
    print(f"wrote {plot_modes(scores, 'ndcg@10', args.out)}")


if __name__ == "__main__":
    main()
