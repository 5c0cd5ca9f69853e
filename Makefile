# Two entry points for a fresh clone: `make demo` and `make test`. Each creates the local
# virtualenv and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint bench proto clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ldptel needs Python 3.11+ (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/ldptel demo

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

bench: install  ## all benchmarks (several minutes; run on a quiet machine)
	$(BIN)/python bench/oracles.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/aggregate.py
	$(BIN)/python bench/heavy_hitters.py
	$(BIN)/python bench/range.py

proto: install
	$(BIN)/python -m ldptel.proto.regenerate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
