# Everything a newcomer needs: `make demo` and `make test`. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/run_demo.py

lint: $(STAMP)
	$(BIN)/ruff check acode tests bench examples
	$(BIN)/ruff format --check acode tests bench examples
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format acode tests bench examples
	$(BIN)/ruff check --fix acode tests bench examples

test: $(STAMP) lint
	$(BIN)/python -m pytest

# The engines it compares against (DBOS, LangGraph) go into their own environment,
# never into $(VENV): `make bench ARGS=--full` for the long run.
BENCH_VENV  ?= .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
