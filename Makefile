# The two commands the README promises: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
POSTGRES_URL ?= postgres://root@127.0.0.1:5432/pikku

.PHONY: install demo test test-sqlite test-postgres coverage lint docs bench clean screenshots

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e . --group dev
	touch $@

install: $(VENV)/.installed

# The demo needs only the app, its REST API's libraries (the `rest` extra's) and its
# Swagger UI's assets (the `demo` group), not the test, lint, docs and browser tools: a
# fresh clone reaches the admin sooner.
$(VENV)/.demo-installed: pyproject.toml
	@if [ -f $(VENV)/.installed ] && [ $(VENV)/.installed -nt pyproject.toml ]; then :; else \
	  $(PYTHON) -m venv $(VENV) && $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -q -e . --group demo; fi
	touch $@

# Migrates, seeds, starts a pikku_worker when Redis answers, serves 127.0.0.1:8000.
demo: $(VENV)/.demo-installed
	$(BIN)/python scripts/demo.py

# ruff everywhere; mypy on the package; import-linter's contracts (pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy pikku_workflows
	$(BIN)/lint-imports

# Coverage of pikku_workflows (worker subprocesses included, pyproject.toml): the SQLite
# pass starts the data afresh, the PostgreSQL pass adds to it, `make coverage` reports it.
COV := --cov=pikku_workflows --cov-report=
# The engine's floor, in % of its lines over both passes.
ENGINE_COVERAGE ?= 90

test-sqlite: install
	PIKKU_TEST_DB=sqlite $(BIN)/pytest -m "not postgres_only" $(COV)

# PostgreSQL: always when PIKKU_REQUIRE_SERVICES=1 (CI) or DATABASE_URL is set, otherwise
# only when a local server answers. The packaging test (its own SQLite database) ran in
# the SQLite pass.
test-postgres: install
	@if [ -n "$$DATABASE_URL" ] || [ "$$PIKKU_REQUIRE_SERVICES" = "1" ] || \
	    $(BIN)/python scripts/postgres_available.py "$(POSTGRES_URL)"; then \
	  DATABASE_URL="$${DATABASE_URL:-$(POSTGRES_URL)}" $(BIN)/pytest \
	    -m "not packaging and not sqlite_only" \
	    $(COV) --cov-append; \
	else echo "PostgreSQL is not reachable: the suite ran on SQLite only"; fi

# The package's coverage (files at 100 % left out of the table), then the engine's alone,
# which fails under ENGINE_COVERAGE.
coverage: install
	$(BIN)/coverage report --skip-covered --skip-empty
	$(BIN)/coverage report --include='pikku_workflows/engine/*,pikku_workflows/runtime/*' --fail-under=$(ENGINE_COVERAGE)

test: lint test-sqlite test-postgres coverage

# The documentation site (MkDocs, mkdocs.yml) from docs/ into site/; a warning is an error.
docs: install
	$(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e . --group dev --group bench
	touch $@

# All benchmarks (B1-B17) at full size against PostgreSQL and Redis; writes BENCHMARKS.md.
# Graphviz is installed for B11's comparison only (the app never needs it); without it,
# B11 says so and skips that comparison.
bench: $(VENV)/.bench-installed
	@command -v dot >/dev/null || apt-get install -y -q graphviz >/dev/null 2>&1 \
	  || echo "Graphviz could not be installed: B11 will skip its comparison with dot"
	$(BIN)/python benchmarks/run_all.py

# The fault suite's chaos scenario at 10,000 runs on 4 workers (about half an hour);
# writes its figures into RELIABILITY.md; then workflow concurrency and the step limits'
# fault tests at the issue's sizes. Outside CI.
soak: install
	DATABASE_URL="$${DATABASE_URL:-$(POSTGRES_URL)}" PIKKU_REQUIRE_SERVICES=1 \
	  $(BIN)/pytest -q -s -p no:cacheprovider tests/faults/soak.py
	# Workflow concurrency: 1,000 runs over 100 keys with SIGKILLs.
	DATABASE_URL="$${DATABASE_URL:-$(POSTGRES_URL)}" PIKKU_REQUIRE_SERVICES=1 \
	  PIKKU_FLOW_SOAK=1 $(BIN)/pytest -q -s -p no:cacheprovider \
	  tests/faults/test_concurrency_kills.py
	# Step limits: 500 steps.
	DATABASE_URL="$${DATABASE_URL:-$(POSTGRES_URL)}" PIKKU_REQUIRE_SERVICES=1 \
	  PIKKU_LIMITS_STEPS=500 $(BIN)/pytest -q -p no:cacheprovider tests/faults/test_step_limits.py

clean:
	rm -rf $(VENV) site demo_project/db tests/*.sqlite3 benchmarks/.data .coverage .coverage.*

# The README's two console screenshots, from a demo of their own (Chromium, no services).
screenshots: install
	$(BIN)/python scripts/screenshots.py
