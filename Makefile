# Two entry points for a fresh clone: `make demo` installs the runtime (the SDK plus the `server`
# extra: collector, aggregator, pages) and runs the stack; `make test` adds the test extras
# (pytest, ruff, mypy, import-linter, Playwright, locust, grpcio-tools) and runs the conflict-marker
# guard, ruff, the import contract (`lint-imports`), mypy, `ldptel audit` on the example config
# (each campaign's privacy claim checked on its mechanism) and the whole suite.
# Each creates the local virtualenv first. `pip install ldptel` alone is the SDK (numpy, xxhash, platformdirs,
# protobuf).
#
# The install is setuptools' strict editable mode: build/__editable__.*/ is a tree of symlinks that
# maps the floors (core/ mechanisms/ client/ server/ aggregator/ shuffler/ commands/ proto/) onto
# the one `ldptel` package, which is how mypy and lint-imports resolve `ldptel.*`. Edits to existing files show at once, but the links are made at install time,
# so the install depends on the *list* of package files ($(FILE_LIST)): adding, removing or renaming
# a module, template or stylesheet re-runs the install on the next `make`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PACKAGE_DIRS := core mechanisms client server aggregator shuffler commands proto
FILE_LIST := build/package-files.txt
RUNTIME_STAMP := $(VENV)/.runtime-stamp
TEST_STAMP := $(VENV)/.test-stamp
# setuptools prints an information-only note ("Editable installation ...") on every editable install
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet
EDITABLE := --config-settings editable_mode=strict

.PHONY: install install-test demo test test-fast test-js typecheck lint bench bench-loadtest bench-all proto clean FORCE

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ldptel needs Python 3.11+ (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Rewritten only when the set of files changes, so its mtime is that of the last add/remove/rename.
$(FILE_LIST): FORCE
	@mkdir -p $(@D)
	@find $(PACKAGE_DIRS) -type f \( -name '*.py' -o -name '*.pyi' -o -name py.typed -o -name '*.proto' \
		-o -name '*.html' -o -name '*.css' \) | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

$(RUNTIME_STAMP): pyproject.toml $(FILE_LIST) | $(BIN)/python
	$(PIP_INSTALL) -e '.[server]' $(EDITABLE)
	@touch $@

# The test install is a superset of the runtime one, so it refreshes both stamps.
$(TEST_STAMP): pyproject.toml $(FILE_LIST) | $(BIN)/python
	$(PIP_INSTALL) -e '.[server,test]' $(EDITABLE)
	@touch $(RUNTIME_STAMP) $@

install: $(RUNTIME_STAMP)

install-test: $(TEST_STAMP)

DEMO_PORT ?= 8000
demo: $(RUNTIME_STAMP)  ## the demo on http://127.0.0.1:$(DEMO_PORT)/ (examples/demo.toml: its tokens)
	$(BIN)/ldptel demo --config examples/demo.toml --port $(DEMO_PORT)

# `make test` and `make test-fast` run pytest on PYTEST_WORKERS processes (pytest-xdist; 0: in
# this process). The unit of work is a test module, except the heaviest end-to-end tests
# (tests/xdist_support.py: HEAVY), one unit started first (tests/conftest.py); each worker has its
# own embedded Redis (with REDIS_URL set, its own database on it).
PYTEST_WORKERS ?= 2
test: $(TEST_STAMP)
	.ci/conflict-markers
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/ldptel audit --config examples/ldptel.toml
	$(MAKE) test-js
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=30

test-js:  ## the JavaScript SDK (client-js/): npm ci, Biome (format + lint), type check, bundles, Vitest in Node and in Chromium
	cd client-js && npm ci --no-audit --no-fund && npm test

test-fast: $(TEST_STAMP)  ## the unit tier: no Redis, no server, no slow test (under a minute)
	LDPTEL_UNIT_TIER=1 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow and not integration"

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

lint: $(TEST_STAMP)  ## merge-conflict markers, ruff, the import contract (pyproject: [tool.importlinter])
	.ci/conflict-markers
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

bench: $(RUNTIME_STAMP)  ## the hot-path table: every row as ldptel ÷ a floor measured beside it (< 5 min)
	$(BIN)/python bench/table.py

BEFORE ?=
bench-loadtest: $(TEST_STAMP)  ## loadtest/run.sh --run-time 60s here and, interleaved, in BEFORE=<checkout> (~10 min)
	$(BIN)/python bench/loadtest_pair.py $(if $(BEFORE),--before $(BEFORE))

bench-all: $(RUNTIME_STAMP)  ## the older per-topic benchmarks (several minutes; run on a quiet machine)
	$(BIN)/python bench/oracles.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/aggregate.py
	$(BIN)/python bench/heavy_hitters.py
	$(BIN)/python bench/shuffled_heavy_hitters.py
	$(BIN)/python bench/range.py

proto: $(TEST_STAMP)
	$(BIN)/python -m ldptel.proto.regenerate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache
