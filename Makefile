# converge: every target sets up what it needs first, so each works on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck docs bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e . --group dev
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/hello_convergence.py

lint: $(STAMP)
	$(BIN)/ruff check converge converge_suggestors tests examples benchmarks
	$(BIN)/ruff format --check converge converge_suggestors tests examples benchmarks

typecheck: $(STAMP)
	$(BIN)/pyright
	$(BIN)/python tools/check_type_completeness.py

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

test: lint typecheck $(STAMP)
	$(BIN)/python -m pytest
	$(BIN)/mkdocs build --strict --quiet --site-dir site

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache .hypothesis
