#!/usr/bin/env bash
# The longer tour on the bundled Cranfield example: train a model on the corpus's own sentences with
# miCSE, export it to ONNX, index with it, compare it with the bundled model on the judged queries,
# then adapt the bundled model's index to its documents (no labels) and measure it again.
# Each corpus is embedded once per model; every evaluation searches an index.
# Usage: scripts/tour.sh [VENV_BIN] [OUT_DIR] [DEMO_INDEX]
set -euo pipefail
BIN=${1:-.venv/bin}
OUT=${2:-tour-out}
DEMO_INDEX=${3:-demo-out/index}
EK="$BIN/embedkit"
DATA=examples/cranfield
mkdir -p "$OUT"

# shellcheck source=scripts/steps.sh
source "$(dirname "$0")/steps.sh"

step "1/6 train: miCSE on 1,000 sentences of the corpus (all-MiniLM-L6-v2 base)"
"$EK" train "$DATA" --split-sentences --limit 1000 --seed 0 --out "$OUT/model" --overwrite

step "2/6 export: ONNX fp32 + int8, parity-checked against PyTorch"
"$EK" export "$OUT/model" --out "$OUT/onnx" --int8

step "3/6 index: the abstracts with the bundled model (make demo's index where it exists), then with the trained one"
if [ -f "$DEMO_INDEX/CURRENT" ]; then
    rm -rf "$OUT/index-base"
    cp -a "$DEMO_INDEX" "$OUT/index-base"  # a copy: adapt below writes a new version into it
    echo "copied $DEMO_INDEX (make demo's index of the same corpus with the bundled model)"
else
    "$EK" index "$DATA" --out "$OUT/index-base" --overwrite
fi
"$EK" index "$DATA" --model "$OUT/onnx" --out "$OUT/index-trained" --overwrite

step "4/6 eval retrieval: both indexes on the 225 judged queries, dense and hybrid"
"$EK" eval retrieval "$DATA" --index "$OUT/index-base" --mode all --json "$OUT/eval-base.json"
"$EK" eval retrieval "$DATA" --index "$OUT/index-trained" --mode all --json "$OUT/eval-trained.json"

step "5/6 adapt: the bundled model fitted to the base index's documents (pseudo queries, no labels)"
"$EK" adapt "$OUT/index-base" --out "$OUT/adapted" --overwrite

step "6/6 eval retrieval: the base index after adapt (re-embedded if a step was kept)"
"$EK" eval retrieval "$DATA" --index "$OUT/index-base" --mode all --json "$OUT/eval-adapted.json"
printf '   (%s s)\n' "$(elapsed "$last")"

"$BIN/python" - "$OUT/eval-base.json" "$OUT/eval-trained.json" "$OUT/eval-adapted.json" <<'EOF'
import json
import sys

base, trained, adapted = (json.load(open(path))["metrics"] for path in sys.argv[1:])
# Training seeds at this budget spread nDCG@10 by about 0.003 (benchmarks/README.md, 1,000 sentences).
print()
for name, run in (("trained", trained), ("adapted", adapted)):
    for mode in ("dense", "hybrid"):
        before, after = base[mode]["ndcg@10"], run[mode]["ndcg@10"]
        change = after - before
        verdict = "within the spread of training seeds" if abs(change) < 0.005 else ("up" if change > 0 else "down")
        print(f"nDCG@10 on Cranfield, {name} vs base, {mode:6}: {before:.4f} -> {after:.4f} ({change:+.4f}, {verdict})")
print("why training moves retrieval little here: docs/training-results.md")
EOF
printf '\nDone in %s s: %s holds the models, the indexes and the evaluation JSON.\n' "$(elapsed "$started")" "$OUT"
