# The README's two commands: `make run` (the whole service on this machine) and `make test` (the whole suite).
# Both create .venv and install wa-outbox into it (`make run` only what it runs, `make test` the test tools too);
# without DATABASE_URL both use an embedded Postgres in .wa-outbox/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

PIP_INSTALL := $(BIN)/pip install --quiet --disable-pip-version-check --constraint constraints.txt

.PHONY: run test test-unit test-db test-system lint install install-runtime install-bench install-docs docs bench bench-quick bench-webhooks bench-outbox constraints clean

# What `make run` runs and nothing more: the package with the embedded Postgres and the simulator, under the pins of
# constraints.txt (docs/deploy.md, "Pinned installs").
$(BIN)/.installed-runtime: setup.cfg setup.py pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "wa-outbox needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[embedded,simulator]'
	@touch $@

install-runtime: $(BIN)/.installed-runtime

# The rest for the tests and the linters (pytest, hypothesis, mypy, ruff, selenium, ...): `make test`, `make lint`.
$(BIN)/.installed: $(BIN)/.installed-runtime
	$(PIP_INSTALL) -e '.[dev]'
	@touch $@

install: $(BIN)/.installed

# The benchmarks' own needs: matplotlib for bench/report.py's plots, the reference queues of bench/outbox.py.
$(BIN)/.installed-bench: $(BIN)/.installed bench/requirements-peers.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]' -r bench/requirements-peers.txt
	@# wrk drives the webhook benchmarks: installed where apt-get can (root on Debian); else run_all skips them, saying why
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		apt-get install -y -qq wrk >/dev/null 2>&1; } || echo "wrk is not installed: the webhook benchmarks will be skipped"
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

run: install-runtime
	$(BIN)/wa-outbox dev $(if $(PORT),--port $(PORT)) $(if $(SIMULATOR_PORT),--simulator-port $(SIMULATOR_PORT))

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

# constraints.txt anew: the newest versions setup.cfg's ranges allow for the runtime, [embedded] and [simulator],
# resolved in a fresh virtualenv and frozen (then run the tests).
constraints:
	rm -rf build/constraints-venv
	$(PYTHON) -m venv build/constraints-venv
	build/constraints-venv/bin/pip install --quiet --disable-pip-version-check '.[embedded,simulator]'
	{ sed -n '/^#/p' constraints.txt; build/constraints-venv/bin/pip freeze --exclude wa-outbox; } > build/constraints.txt
	mv build/constraints.txt constraints.txt
	rm -rf build/constraints-venv

clean:
	rm -rf $(VENV) *.egg-info build dist
