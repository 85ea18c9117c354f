# Two commands do all set-up on a fresh machine with Python 3.10+ and make:
#   make book   - create .venv if missing, install the pinned toolchain and posenc, build the site
#                 and its PDF edition (printed by headless Chromium)
#   make test   - the same set-up, then, in this order: lint (ruff); the unit tests (the workflow
#                 checks among them) and nbval, with the warning-free build and PDF running beside
#                 them; the browser tests; the PDF checks
# Also: make lint, make html (the site only), make pdf, make test-site (builds the site first), make execute (re-run every notebook
# in place), make colab-check (every notebook as Colab runs it, in three environments of the
# newest releases), make clean. Nothing but Python, make and (for the browser tests) Chromium
# is needed.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUILD_FLAGS := -W -n --keep-going
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg
# pytest-xdist workers for the unit tests, nbval and the browser tests (auto: one per core).
# nbval keeps each notebook whole on one worker (--dist loadfile): its cells share one kernel and
# run in order. book/conftest.py starts a kernel again (up to three times) if it dies while starting:
# two workers' kernels can pick the same port.
JOBS ?= auto

unexport PYTHONDONTWRITEBYTECODE

# For the Python that trains and evaluates small models (unit tests, nbval, re-execution, the
# Colab check's kernels, which inherit it): glibc's malloc hands every large freed block back to the
# kernel and page-faults the next one in again, and a forward pass of the lab's models at 8 L_0
# allocates (128, 4, 256, 256) attention weights, 134 MB, several times. Keeping freed memory in
# the process (no mmap for malloc, no trimming) halves that: chapter 9 under nbval took 104 s
# (81 s of it system time) and takes 64 s (15 s); five passkey depths at 8 L_0, 8.1 s against
# 4.1 s (2 cores, AMD EPYC, glibc 2.36). Speed only: what is computed does not change. A C library
# other than glibc ignores the variable.
FAST_MALLOC := GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296

# The steps of `make test` run one after another, in the order listed, even under make -j:
# they share .venv and _build.
.NOTPARALLEL:

.PHONY: setup book html pdf test lint test-unit test-notebooks tests-beside-book test-site test-pdf lint-workflows browser execute colab-check clean

setup: $(STAMP)

# Re-installs only when the pins or posenc's metadata change, so a second run is fast. --no-compile:
# pip would byte-compile every module of every package (torch installs in 17 s with it, 7 s without);
# Python compiles, and caches, only the modules that are imported. It caches them only if
# PYTHONDONTWRITEBYTECODE is unset, so make unsets it for what it runs: with it set (as on some CI
# machines), every Python process compiled every module it imported, every time (importing torch,
# numpy and matplotlib: 5.5-6.6 s against 3.2 s from the cache; a no-op book build: 33 s against
# 23 s). The caches go to __pycache__ folders, which git ignores.
$(STAMP): requirements.txt code/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "error: Python 3.10 or newer is needed, $(PYTHON) is " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-compile -e code
	touch $@

# The site, and the PDF edition that the site links to (tools/build_pdf.py: the single-page build
# printed by the same headless Chromium the browser tests use). The two builds run side by side, one
# per core (each has its own build folder; tools/build_pdf.py: PRINT_BUILD): from a fresh clone on
# 2 cores, 27 s for the site then 102 s for the PDF one after the other, 115 s side by side (the
# single-page build no longer reuses the site's parsed pages, 13 s more on its own core). Their logs
# interleave; each build's failure fails make book.
book: $(STAMP) browser
	@status=0; \
	$(MAKE) --no-print-directory html & site=$$!; \
	$(MAKE) --no-print-directory $(PDF_FILE) || status=1; \
	wait $$site || status=1; \
	exit $$status
	$(PDF_TO_SITE)
	@echo "The site: $(CURDIR)/_build/html/index.html"

# Sphinx rebuilds the pages whose sources changed, but when none did it stops before copying the
# static files, and a changed extension does not mark any page as changed: an edited style sheet,
# script, template or extension left the site stale (and the browser tests testing the old one). When
# one of those is newer than the last build's start (HTML_STAMP), or a site is there with no record
# of its build, everything is rebuilt (--all; 27 s on 2 cores).
SITE_INPUTS := book/_static_files book/_templates book/_ext
HTML_STAMP := _build/.html-started
html: $(STAMP)
	@all=; if [ -d _build/html ] && { [ ! -f $(HTML_STAMP) ] || \
		[ -n "$$(find $(SITE_INPUTS) -type f -newer $(HTML_STAMP) | head -1)" ]; }; then all=--all; fi; \
	mkdir -p _build && touch $(HTML_STAMP).new && \
	echo "$(BIN)/jupyter-book build . $(BUILD_FLAGS) $$all" && \
	$(BIN)/jupyter-book build . $(BUILD_FLAGS) $$all && mv $(HTML_STAMP).new $(HTML_STAMP)

# The PDF is printed again only when something it is made from changed (make test asks for it
# three times: book, test-site, test-pdf); the site's copy of it, and of the chapters' own PDFs
# (_build/pdf/chapters, the pages' download menus link them), is restored if the site was rebuilt.
PDF_NAME := $(shell sed -n 's/^ *book_pdf: *//p' _config.yml)
PDF_FILE := _build/pdf/$(PDF_NAME)
PDF_SOURCES := $(shell find book -type f -not -path '*/.*' -not -path '*/__pycache__/*') \
	_config.yml _toc.yml tools/build_pdf.py tests/site/conftest.py requirements.txt

pdf: html $(PDF_FILE)
	$(PDF_TO_SITE)

define PDF_TO_SITE
@cmp -s $(PDF_FILE) _build/html/$(PDF_NAME) || cp $(PDF_FILE) _build/html/$(PDF_NAME)
@mkdir -p _build/html/pdf && cp -p _build/pdf/chapters/*.pdf _build/html/pdf/
endef

$(PDF_FILE): $(PDF_SOURCES) | $(STAMP) browser
	$(BIN)/python tools/build_pdf.py

# tools/lint-workflows.sh runs inside test-unit (tests/test_workflow.py, on the real workflows and
# on broken ones), so `make lint-workflows` is a separate shortcut, not a step of `make test`.
# The unit tests and nbval run one after the other in front while the book builds in the background:
# the build keeps about one core busy (the site's build ends after about 27 s; then the PDF edition is
# one Chromium page printing and one Python process), and the tests' two workers fill the rest. (Not
# make -j: .NOTPARALLEL above makes every target of this Makefile run one at a time, so two make
# processes are started by hand, as book does for its two builds.) The build's output goes to
# _build/book.log and is printed whole after all have ended, so it does not interleave with the tests'; a failure of
# any of the three fails the step, and the tests in front all run even if one fails. Measured on 2
# cores from an empty _build (2026-12-04): 196 s for the three, against 53 s for the unit tests and
# then 188 s for nbval beside the build (the PDF edition printed its last 70 s alone, one core idle).
test: lint tests-beside-book test-site test-pdf

tests-beside-book: $(STAMP) browser
	@mkdir -p _build; status=0; \
	$(MAKE) --no-print-directory book > _build/book.log 2>&1 & book=$$!; \
	$(MAKE) --no-print-directory test-unit || status=1; \
	$(MAKE) --no-print-directory test-notebooks || status=1; \
	wait $$book || status=1; \
	echo "make book (beside the unit tests and nbval), its output:"; cat _build/book.log; \
	exit $$status

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
	$(FAST_MALLOC) OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) tests --ignore=tests/site --ignore=tests/pdf

# One compute thread per kernel: the kernels share the cores, and two kernels of two threads each
# on two cores train several times slower than two of one thread (the stored outputs are the same
# either way; tools/execute_notebooks.py writes them with the same setting).
test-notebooks: $(STAMP)
	$(FAST_MALLOC) OMP_NUM_THREADS=1 $(BIN)/python -m pytest $(NBVAL) -n $(JOBS) --dist loadfile --durations=10 book

# check-jsonschema (GitHub's workflow schema, vendored in the package: works offline) and zizmor
# must report nothing; tests/test_workflow.py (run with the unit tests) checks the rest.
lint-workflows: $(STAMP)
	@bash tools/lint-workflows.sh $(BIN)

browser: $(STAMP)
	@bash tools/ensure-browser.sh $(BIN)

# Builds the site first (Sphinx rebuilds only what changed), so that the browser tests never
# look at a stale or missing site. SITE_SCREENSHOTS=1 also saves a full-page screenshot of every
# page under _build/screenshots (for people to look at after changing the site; about a minute more
# on 2 cores); the book workflow sets it and keeps them.
# A page's tests go to one worker (--dist loadgroup; tests/site/conftest.py groups them), so that no
# worker waits while another loads a page both need. A visit (one page loaded at one size and theme,
# every check that only looks run on it) is kept in _build/visit-cache and used again by the next run
# while every file the page asked for, the tests and the browser are byte for byte the same
# (tests/site/conftest.py: "Visits kept between runs"); a fresh clone has none.
# SITE_VISIT_CACHE=0 loads every page again.
SITE_SCREENSHOTS ?=
SITE_VISIT_CACHE ?=
test-site: book browser
	SITE_SCREENSHOTS=$(SITE_SCREENSHOTS) SITE_VISIT_CACHE=$(SITE_VISIT_CACHE) \
		$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup --durations=10 tests/site

# Checks the PDF edition: chapter titles, no TeX source, sane page count, working links; saves
# page images under _build/screenshots.
test-pdf: book
	$(BIN)/python -m pytest -n $(JOBS) tests/pdf

execute: $(STAMP)
	$(FAST_MALLOC) $(BIN)/python tools/execute_notebooks.py book

# Every notebook of the committed HEAD as a Colab reader runs it (tools/colab_check.py): a fresh
# kernel in an empty folder, its set-up cell installing posenc with pip from a local clone of the
# repository, in three venvs of the newest releases (never the pins above): transformers 5.x,
# 4.x and none; the first is made from .venv (--from-pypi: from PyPI). The venvs live in
# _build/colab-check/.venvs and are reused while their requirements are unchanged; the table goes
# to _build/colab-check/report.md. Not part of `make test` (about 5½ minutes more on 2 cores from a
# fresh clone); .ci/run runs it after `make test`, and weekly .github/workflows/colab.yml in
# Colab's runtime image. Options: make colab-check COLAB_CHECK_FLAGS="--env tf4 --notebooks rope"
# (parts of notebook names); --fresh rebuilds the venvs with the then-newest releases.
COLAB_CHECK_FLAGS ?=
colab-check: $(STAMP)
	$(FAST_MALLOC) $(BIN)/python tools/colab_check.py --python $(PYTHON) $(COLAB_CHECK_FLAGS)

clean:
	rm -rf _build .pytest_cache .ruff_cache book/.ruff_cache book/_ext/.ruff_cache
