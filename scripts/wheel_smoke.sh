#!/usr/bin/env bash
# A regular install, as a user gets it: build the sdist and, from it, the wheel; check the wheel's
# files against the source tree; install it with [cpu,serve] into a fresh virtual environment outside
# the source tree; then, from there: `embedkit --version`, index the bundled example, a hybrid search,
# `embedkit serve` answering /health and /search; finally resolve the other extras from the wheel
# (a dry run: nothing is downloaded beyond metadata).
# Usage: scripts/wheel_smoke.sh [VENV_BIN]   VENV_BIN: the environment that builds (default .venv/bin,
# `make setup`'s). PYTHON makes the fresh environment (default python3); TORCH is installed into it
# first, as in the Makefile (default torch==2.13.0), so that nothing pulls a CUDA build by accident.
# LOCK (default constraints.txt; empty: the newest releases) constrains every install, as in the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=${1:-.venv/bin}
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
LOCK=${LOCK-constraints.txt}
CONSTRAINTS=()
[ -z "$LOCK" ] || CONSTRAINTS=(-c "$PWD/$LOCK")
QUERY="what is the effect of a propeller slipstream on wing lift"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

WORK=$(mktemp -d "${TMPDIR:-/tmp}/embedkit-wheel-smoke.XXXXXX")
server=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
# the bundled model's ONNX copy is made anew, as on a new user's machine
export EMBEDKIT_CACHE_DIR="$WORK/cache"
SECONDS=0
step() { printf '\n== wheel smoke %s (%d s)\n' "$*" "$SECONDS"; }
fail() { printf 'wheel smoke failed: %s\n' "$*" >&2; exit 1; }

step "1/8 build: the sdist, then the wheel from it"
"$BIN/python" -m build --quiet --outdir "$WORK/dist" . > "$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
sdist=$(ls "$WORK"/dist/embedkit-*.tar.gz)
wheel=$(ls "$WORK"/dist/embedkit-*.whl)
ls -l "$sdist" "$wheel"

step "2/8 the wheel's files against the source tree, its license and extras"
EMBEDKIT_TEST_WHEEL="$wheel" "$BIN/python" -m pytest -q -p no:cacheprovider tests/test_packaging.py

step "3/8 install: a fresh environment, $TORCH first, then the wheel with [cpu,serve]"
"$PYTHON" -m venv "$WORK/venv"
V="$WORK/venv/bin"
"$V/python" -m pip install --quiet --upgrade pip
# shellcheck disable=SC2086  # TORCH may carry options (--index-url ...), as in the Makefile
"$V/python" -m pip install --quiet "${CONSTRAINTS[@]}" $TORCH
"$V/python" -m pip install --quiet "${CONSTRAINTS[@]}" "$wheel[cpu,serve]"
cd "$WORK"  # from here on, nothing can be imported from the source tree
installed=$("$V/python" -c "import embedkit; print(embedkit.__file__)")
case $installed in
    "$WORK/venv/"*) echo "embedkit imported from $installed" ;;
    *) fail "embedkit imported from $installed, not from the fresh environment" ;;
esac

step "4/8 embedkit --version"
"$V/embedkit" --version

step "5/8 index the bundled example ($REPO/examples/cranfield) with the bundled model"
"$V/embedkit" index "$REPO/examples/cranfield" --out "$WORK/index" --device cpu

step "6/8 a hybrid search"
"$V/embedkit" search "$WORK/index" "$QUERY" --mode hybrid -k 3 | tee "$WORK/search.txt"
[ -s "$WORK/search.txt" ] || fail "the search printed nothing"

step "7/8 serve on 127.0.0.1, a free port: /health, then one /search"
"$V/embedkit" serve --index "$WORK/index" --host 127.0.0.1 --port 0 --device cpu > "$WORK/serve.log" 2>&1 &
server=$!
url=""
for _ in $(seq 1200); do  # up to 2 minutes: the URL line, then /health once the model answered
    url=${url:-$(grep -o 'http://[^ ]*' "$WORK/serve.log" | head -1 || true)}
    if [ -n "$url" ] && curl -sf "$url/health" > "$WORK/health.json"; then break; fi
    kill -0 "$server" 2>/dev/null || { cat "$WORK/serve.log"; fail "the server exited"; }
    sleep 0.1
done
[ -s "$WORK/health.json" ] || { cat "$WORK/serve.log"; fail "no answer from $url/health in 2 minutes"; }
printf 'GET /health: %s\n' "$(cat "$WORK/health.json")"
curl -sf "$url/search" -H 'Content-Type: application/json' -o "$WORK/serve-search.json" \
    -d "{\"query\": \"$QUERY\", \"k\": 3}" || fail "POST /search failed"
printf 'POST /search: %s ...\n' "$(head -c 300 "$WORK/serve-search.json")"
kill -TERM "$server"
wait "$server" || fail "the server exited with status $? on SIGTERM"
server=""

step "8/8 extras: [gpu], [distributed] and [plots] resolve from the wheel (dry run)"
"$V/python" -m pip install --quiet --dry-run --report "$WORK/extras.json" "${CONSTRAINTS[@]}" "$wheel[gpu,distributed,plots]"
"$V/python" - "$WORK/extras.json" <<'EOF'
import json, sys

names = {item["metadata"]["name"].lower() for item in json.load(open(sys.argv[1]))["install"]}
faiss = {"faiss-gpu-cuvs", "faiss-gpu"} & names
missing = {"onnxruntime-gpu", "ray", "matplotlib"} - names
if missing or not faiss:
    sys.exit(f"wheel smoke failed: the extras did not resolve to {sorted(missing) or 'a GPU faiss'}")
print("would install", ", ".join(sorted({"onnxruntime-gpu", "ray", "matplotlib"} | faiss)), "and their dependencies")
EOF

printf '\nwheel smoke passed in %d s\n' "$SECONDS"
