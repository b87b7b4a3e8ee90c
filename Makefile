# The README's two commands: `make run` (the whole service on this machine) and `make test` (the whole suite).
# Both create .venv and install wa-outbox into it; without DATABASE_URL both use an embedded Postgres in .wa-outbox/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-unit test-db test-system lint install install-bench install-docs docs bench bench-quick bench-webhooks bench-outbox clean

$(BIN)/.installed: setup.cfg setup.py pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "wa-outbox needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

install: $(BIN)/.installed

# The benchmarks' own needs: matplotlib for bench/report.py's plots, the reference queues of bench/outbox.py.
$(BIN)/.installed-bench: $(BIN)/.installed bench/requirements-peers.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]' -r bench/requirements-peers.txt
	@touch $@

install-bench: $(BIN)/.installed-bench

# Every benchmark at its published size, then bench/report.py (docs/results/, docs/benchmarks.md, docs/img/, the
# README's headline table). BENCH_LOCK=path: hold an exclusive flock on path during each benchmark.
bench: install-bench
	$(BIN)/python bench/run_all.py $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

# The same at small sizes into build/bench-quick/: does each one start and finish? (Never published.)
bench-quick: install-bench
	$(BIN)/python bench/run_all.py --quick $(if $(BENCH_LOCK),--lock $(BENCH_LOCK))

# The documentation site: MkDocs from docs/ (mkdocs.yml), every warning an error, into build/site/.
$(BIN)/.installed-docs: $(BIN)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,docs]'
	@touch $@

install-docs: $(BIN)/.installed-docs

docs: install-docs
	$(BIN)/mkdocs build --strict --site-dir build/site

run: install
	$(BIN)/wa-outbox dev

test: install
	$(BIN)/python -m pytest

# One tier of the suite (make test runs all three): tests/unit needs no database and runs in seconds; tests/db runs
# against Postgres with the in-process app, worker and simulator; tests/system starts real processes and browsers.
test-unit: install
	$(BIN)/python -m pytest tests/unit

test-db: install
	$(BIN)/python -m pytest tests/db

test-system: install
	$(BIN)/python -m pytest tests/system

# ruff and mypy as pyproject.toml configures them.
lint: install
	$(BIN)/ruff check wa_outbox migrations tests bench docs/*.py
	$(BIN)/mypy

bench-webhooks: install
	$(BIN)/python bench/webhooks.py

bench-outbox: install
	$(BIN)/pip install --quiet --disable-pip-version-check -r bench/requirements-peers.txt
	$(BIN)/python bench/outbox.py

clean:
	rm -rf $(VENV) *.egg-info build dist
