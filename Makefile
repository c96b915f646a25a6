# embedkit: `make demo` runs the whole pipeline on the bundled example, `make test` runs the tests.
# Both create the virtual environment on first use. `make wheel-smoke` installs the built wheel into a
# fresh environment and runs it there (scripts/wheel_smoke.sh; CI runs it after the tests). Override TORCH to pick another torch build,
# e.g. `make test TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"`.
# `make gpu-check` proves the GPU half on a CUDA machine, each figure against its goal
# (benchmarks/gpu_check.py; GPU_CHECK_ARGS="--train-1m" adds the one-million-sentence run). It runs
# .venv's python where there is one, else $(PYTHON) with embedkit installed, and refuses without CUDA.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
EXTRAS ?= cpu,dev,plots
BIN := $(VENV)/bin
STAMP := $(VENV)/.embedkit-installed
DEMO := demo-out
PYTEST_ARGS ?=

GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_CHECK_ARGS ?=

.PHONY: setup demo test lint wheel-smoke gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, so that nothing below pulls a multi-GB CUDA build by accident
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

demo: $(STAMP)
	bash scripts/demo.sh $(BIN) $(DEMO)

wheel-smoke: $(STAMP)
	TORCH="$(TORCH)" PYTHON="$(PYTHON)" bash scripts/wheel_smoke.sh $(BIN)

gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(DEMO) build dist *.egg-info .pytest_cache
