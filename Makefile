# Two commands do all set-up on a fresh machine with Python 3.10+ and make:
#   make book   - create .venv if missing, install the pinned toolchain and posenc, build the site
#   make test   - the same set-up, then, in this order: lint (ruff), unit tests, workflow checks,
#                 nbval, the warning-free build, the browser tests
# Also: make lint, make test-site (builds the site first), make execute (re-run every notebook
# in place), make clean. Nothing but Python, make and (for the browser tests) Chromium is needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD_FLAGS := -W -n --keep-going
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg

# The steps of `make test` run one after another, in the order listed, even under make -j:
# they share .venv and _build.
.NOTPARALLEL:

.PHONY: setup book test lint test-unit test-notebooks test-site test-workflows browser execute clean

setup: $(STAMP)

# Re-installs only when the pins or posenc's metadata change, so a second run is fast.
$(STAMP): requirements.txt code/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10 or newer is needed, $(PYTHON) is " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -e code
	touch $@

book: $(STAMP)
	$(BIN)/jupyter-book build . $(BUILD_FLAGS)
	@echo "The site: $(CURDIR)/_build/html/index.html"

test: lint test-unit test-workflows test-notebooks book test-site

# ruff over all the Python: code/, tests/, tools/, book/_ext/, benchmarks/ and the notebooks
# (settings: ruff.toml, book/ruff.toml). Runs both checks, then fails if either found anything:
# a lint finding or a file that `ruff format` would change. `ruff check --fix .` and
# `ruff format .` fix most of it.
lint: $(STAMP)
	@status=0; \
	echo "$(BIN)/ruff check ."; $(BIN)/ruff check . || status=1; \
	echo "$(BIN)/ruff format --check ."; $(BIN)/ruff format --check . || status=1; \
	exit $$status

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/site

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest $(NBVAL) book

# check-jsonschema (GitHub's workflow schema, vendored in the package: works offline) and zizmor
# must report nothing; tests/test_workflow.py (run with the unit tests) checks the rest.
test-workflows: $(STAMP)
	@bash tools/lint-workflows.sh $(BIN)

browser: $(STAMP)
	@bash tools/ensure-browser.sh $(BIN)

# Builds the site first (Sphinx rebuilds only what changed), so that the browser tests never
# look at a stale or missing site.
test-site: book browser
	$(BIN)/python -m pytest tests/site

execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py book

clean:
	rm -rf _build .pytest_cache .ruff_cache book/.ruff_cache book/_ext/.ruff_cache
