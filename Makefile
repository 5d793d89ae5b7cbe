# distal developer tasks. `make` or `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
N      ?= 1024

.DEFAULT_GOAL := help
.PHONY: help install test lint demo ci

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python ## create .venv and install distal editable with the extras CI installs
	$(BIN)/python -m pip install -e ".[test,lint,viz,dask]"

test: ## run the test suite (python -m pytest -q)
	$(BIN)/python -m pytest -q

lint: ## ruff check the sources, tests, benchmarks and examples
	$(BIN)/ruff check $(wildcard src tests benchmarks examples)

demo: ## run the distributed GEMM demo (make demo N=256)
	$(BIN)/python -m distal demo --n $(N)

ci: ## run the CI script exactly as CI does
	CI=true bash .ci/run
