#!/usr/bin/env bash
# A first run on the bundled Cranfield example (aerodynamics abstracts, BEIR layout) with the bundled
# model: index it, search it, measure it on its judged queries, serve it. The corpus is embedded once
# (by `index`); evaluation searches that index, with the fusion `index` calibrated for it.
# Training, export and adaptation are the longer tour: scripts/tour.sh (`make tour`).
# Usage: scripts/demo.sh [VENV_BIN] [OUT_DIR]
set -euo pipefail
BIN=${1:-.venv/bin}
OUT=${2:-demo-out}
EK="$BIN/embedkit"
DATA=examples/cranfield
QUERY="what is the effect of a propeller slipstream on wing lift"
mkdir -p "$OUT"

# shellcheck source=scripts/steps.sh
source "$(dirname "$0")/steps.sh"

step "1/5 index: the 1,398 abstracts with the bundled all-MiniLM-L6-v2 (FAISS), BM25 beside them, fusion calibrated"
"$EK" index "$DATA" --out "$OUT/index" --overwrite

step "2/5 search: hybrid, with the fusion the index chose"
"$EK" search "$OUT/index" "$QUERY" -k 5

step "3/5 eval retrieval: the 225 judged queries through the index; dense, BM25 and hybrid (nDCG@10, ...)"
"$EK" eval retrieval "$DATA" --index "$OUT/index" --mode all --json "$OUT/eval.json"

step "4/5 eval sts: sentence similarity on 150 STS Benchmark pairs"
"$EK" eval sts examples/sts/sts-sample.tsv --json "$OUT/eval-sts.json"

step "5/5 serve: the index over HTTP (one embeddings call, one search), then stop"
serve_log="$OUT/serve.log"
"$EK" serve --index "$OUT/index" --port 0 --device cpu > "$serve_log" 2>&1 &
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
    -d "{\"query\": \"$QUERY\", \"k\": 3}"
printf 'POST /search: %s ...\n' "$(head -c 400 "$OUT/serve-search.json")"
kill -TERM "$server"; wait "$server"; trap - EXIT
tail -2 "$serve_log"
printf '   (%s s)\n' "$(elapsed "$last")"

# The last lines: what hybrid search adds to the model alone, on this collection's judged queries.
"$BIN/python" - "$OUT/eval.json" <<'EOF'
import json
import sys

metrics = json.load(open(sys.argv[1]))["metrics"]
dense, lexical, hybrid = (metrics[mode]["ndcg@10"] for mode in ("dense", "lexical", "hybrid"))
print(f"\nnDCG@10 on Cranfield: dense {dense:.4f}, BM25 {lexical:.4f}, hybrid {hybrid:.4f} "
      f"(the default of `embedkit search`: {hybrid - dense:+.4f} over the model alone)")
EOF
printf '\nDone in %s s: %s holds the index and the evaluation JSON. Next: `make tour` trains, exports and adapts.\n' \
    "$(elapsed "$started")" "$OUT"
