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

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
