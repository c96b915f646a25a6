#!/usr/bin/env bash
# The whole pipeline on the bundled Cranfield example (aerodynamics abstracts, BEIR layout):
# train an encoder on its sentences, export it to ONNX, index the corpus, search, evaluate.
# Usage: scripts/demo.sh [VENV_BIN] [OUT_DIR]
set -euo pipefail
BIN=${1:-.venv/bin}
OUT=${2:-demo-out}
EK="$BIN/embedkit"
DATA=examples/cranfield
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

step() { printf '\n== %s\n' "$*"; }

step "1/7 train: miCSE on 1,000 sentences of the corpus (all-MiniLM-L6-v2 base)"
"$EK" train "$DATA" --split-sentences --limit 1000 --seed 0 --out "$OUT/model" --overwrite

step "2/7 export: ONNX fp32 + int8, parity-checked against PyTorch"
"$EK" export "$OUT/model" --out "$OUT/onnx" --int8

step "3/7 index: FAISS over the 1,400 abstracts, documents in SQLite"
"$EK" index "$DATA" --model "$OUT/onnx" --out "$OUT/index" --overwrite

step "4/7 search"
"$EK" search "$OUT/index" "what is the effect of a propeller slipstream on wing lift" -k 5

step "5/7 eval retrieval: the base model, then the trained one; dense, BM25 and hybrid (nDCG@10, MRR@10, ...)"
"$EK" eval retrieval "$DATA" --mode all --json "$OUT/eval-base.json"
"$EK" eval retrieval "$DATA" --model "$OUT/onnx" --mode all --json "$OUT/eval-trained.json"

step "6/7 eval pseudo: label-free in-domain retrieval test built from the corpus itself"
"$EK" eval pseudo "$DATA" --model "$OUT/onnx" --queries 100 --json "$OUT/eval-pseudo.json"

step "7/7 serve: the ONNX model and the index over HTTP (one embeddings call, one search), then stop"
serve_log="$OUT/serve.log"
"$EK" serve "$OUT/onnx" --index "$OUT/index" --port 0 --device cpu > "$serve_log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1200); do  # up to 2 minutes: the URL line, then /health once the model answered
    url=${url:-$(grep -o 'http://[^ ]*' "$serve_log" | head -1 || true)}
    if [ -n "$url" ] && curl -sf "$url/health" > /dev/null; then break; fi
    kill -0 "$server" 2>/dev/null || { cat "$serve_log"; exit 1; }
    sleep 0.1
done
cat "$serve_log"
curl -sf "$url/v1/embeddings" -H 'Content-Type: application/json' -o "$OUT/serve-embedding.json" \
    -d '{"input": ["shock waves on a swept wing"], "model": "demo"}'
printf 'POST /v1/embeddings: %s ...\n' "$(head -c 160 "$OUT/serve-embedding.json")"
curl -sf "$url/search" -H 'Content-Type: application/json' -o "$OUT/serve-search.json" \
    -d '{"query": "what is the effect of a propeller slipstream on wing lift", "k": 3}'
printf 'POST /search: %s ...\n' "$(head -c 400 "$OUT/serve-search.json")"
kill -TERM "$server"; wait "$server"; trap - EXIT
tail -2 "$serve_log"

printf '\nDone: %s holds the model, its ONNX export, the index and the evaluation JSON.\n' "$OUT"

# The last lines: what training did to dense retrieval, and what hybrid search adds to each model.
"$BIN/python" - "$OUT/eval-base.json" "$OUT/eval-trained.json" <<'EOF'
import json
import sys

base, trained = (json.load(open(path))["metrics"] for path in sys.argv[1:])
# Training seeds at this budget spread nDCG@10 by about 0.003 (benchmarks/README.md, 1,000 sentences).
for mode in ("dense", "hybrid"):
    before, after = base[mode]["ndcg@10"], trained[mode]["ndcg@10"]
    change = after - before
    verdict = "within the spread of training seeds" if abs(change) < 0.005 else ("up" if change > 0 else "down")
    print(f"nDCG@10 on Cranfield, {mode:6}: base {before:.4f}, trained {after:.4f} ({change:+.4f}, {verdict})")
gain = base["hybrid"]["ndcg@10"] - base["dense"]["ndcg@10"]
print(f"hybrid search (the default of `embedkit search`) adds {gain:+.4f} to the base model's dense nDCG@10; "
      "why: docs/training-results.md")
EOF
