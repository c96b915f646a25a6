# embedkit: `make setup` installs what searching, serving and training need into .venv; `make demo`
# runs a first search on the bundled example (several minutes: README.md has the measured times),
# `make tour` the longer tour (train, export, adapt), `make test` the tests (it adds the test-only
# packages itself).
# Every install takes the versions in constraints.txt, the ones the tests passed with (`make lock`
# writes it anew); `LOCK=` installs the newest versions pyproject.toml's ranges allow instead, as
# `make test-newest` does in .venv-newest. `make wheel-smoke` installs the built wheel into a fresh
# environment and runs it there (scripts/wheel_smoke.sh). Override TORCH to pick another torch build,
# e.g. `make test TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"`.
# `make gpu-check` proves the GPU half on a CUDA machine, each figure against its goal
# (benchmarks/gpu_check.py, the one-million-sentence run included; GPU_CHECK_ARGS="--no-train-1m" leaves it out). It runs
# .venv's python where there is one, else $(PYTHON) with embedkit installed, and refuses without CUDA.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
# a user's install: the ONNX Runtime and faiss CPU builds, the HTTP server, PDF/HTML/DOCX reading
EXTRAS ?= cpu,serve,documents
# the tests' additions: pytest, Milvus Lite, Ray, Playwright, sentence-transformers, matplotlib, ...
TEST_EXTRAS ?= cpu,serve,test
LOCK ?= constraints.txt
CONSTRAINTS := $(if $(LOCK),-c $(LOCK))
BIN := $(VENV)/bin
STAMP := $(VENV)/.embedkit-installed
TEST_STAMP := $(VENV)/.embedkit-test-installed
DEMO := demo-out
TOUR := tour-out
PYTEST_ARGS ?=

GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_CHECK_ARGS ?=

.PHONY: setup test-setup demo tour test test-newest lint typecheck lock wheel-smoke gpu-check clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, so that nothing below pulls a multi-GB CUDA build by accident
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) $(TORCH)
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	rm -f $(TEST_STAMP)
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet $(CONSTRAINTS) -e ".[$(TEST_EXTRAS)]"
	touch $(TEST_STAMP)

setup: $(STAMP)

test-setup: $(TEST_STAMP)

test: $(TEST_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the suite on the newest releases the ranges allow, in an environment of its own; on a failure,
# the releases that differ from the lock (scripts/lock_drift.py)
test-newest:
	rm -rf .venv-newest
	$(MAKE) --no-print-directory test-setup VENV=.venv-newest LOCK=
	.venv-newest/bin/python -m pytest $(PYTEST_ARGS) \
		|| { echo "the suite failed on the newest releases; one of these broke what failed:"; \
		     .venv-newest/bin/python scripts/lock_drift.py constraints.txt; exit 1; }

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m mypy

# mypy over embedkit/ as pyproject.toml's [tool.mypy] sets it: strict on search, index, encode and
# serve, the default level elsewhere (docs/code-layout.md)
typecheck: $(TEST_STAMP)
	$(BIN)/python -m mypy

# constraints.txt from the test environment (run `make test` on it first): every package but
# embedkit and torch (TORCH picks that build)
lock: $(TEST_STAMP)
	$(BIN)/python scripts/lock_drift.py --write constraints.txt

demo: $(STAMP)
	bash scripts/demo.sh $(BIN) $(DEMO)

tour: $(STAMP)
	bash scripts/tour.sh $(BIN) $(TOUR) $(DEMO)/index

wheel-smoke: $(TEST_STAMP)
	TORCH="$(TORCH)" PYTHON="$(PYTHON)" LOCK="$(LOCK)" bash scripts/wheel_smoke.sh $(BIN)

gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(DEMO) $(TOUR) build dist *.egg-info .pytest_cache .mypy_cache
