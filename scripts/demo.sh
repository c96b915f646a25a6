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

step "1/6 train: miCSE on 1,000 sentences of the corpus (all-MiniLM-L6-v2 base)"
"$EK" train "$DATA" --split-sentences --limit 1000 --seed 0 --out "$OUT/model" --overwrite

step "2/6 export: ONNX fp32 + int8, parity-checked against PyTorch"
"$EK" export "$OUT/model" --out "$OUT/onnx" --int8

step "3/6 index: FAISS over the 1,400 abstracts, documents in SQLite"
"$EK" index "$DATA" --model "$OUT/onnx" --out "$OUT/index" --overwrite

step "4/6 search"
"$EK" search "$OUT/index" "what is the effect of a propeller slipstream on wing lift" -k 5

step "5/6 eval retrieval: the base model, then the trained one (nDCG@10, MRR@10, recall, MAP)"
"$EK" eval retrieval "$DATA" --json "$OUT/eval-base.json"
"$EK" eval retrieval "$DATA" --model "$OUT/onnx" --json "$OUT/eval-trained.json"

step "6/6 eval pseudo: label-free in-domain retrieval test built from the corpus itself"
"$EK" eval pseudo "$DATA" --model "$OUT/onnx" --queries 100 --json "$OUT/eval-pseudo.json"

printf '\nDone: %s holds the model, its ONNX export, the index and the evaluation JSON.\n' "$OUT"
