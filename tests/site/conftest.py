"""What the browser tests share: the built site served on 127.0.0.1, headless Chromium, the list
of the site's pages, and the guard that records what a page did wrong.

tools/build_pdf.py imports this module too (CHROMIUM_FLAGS, find_chromium, serve), so that the PDF
edition is printed by the same browser, with the same flags, from the same kind of server.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
# Folders of the build that hold assets and sources, not pages.
NOT_PAGES = {"_static", "_sources", "_images"}
# GitHub Pages' page for a missing address: its links are absolute under the site's path on Pages,
# so it is checked on its own (tests/site/test_site_files.py), not as a page of the book.
NOT_BOOK_PAGES = {"404.html"}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def find_chromium() -> str | None:
    """A system Chromium, or None to let Playwright use its own downloaded build."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


def site_pages() -> list[str]:
    """Every HTML page of the built site, relative to its root and sorted; [] when it is not built."""
    if not SITE.is_dir():
        return []
    return sorted(
        str(p.relative_to(SITE))
        for p in SITE.rglob("*.html")
        if not (NOT_PAGES & set(p.relative_to(SITE).parts)) and str(p.relative_to(SITE)) not in NOT_BOOK_PAGES
    )


def guard(page) -> list[str]:
    """Record what a Playwright page does wrong; returns the list, which fills while the page runs.

    Installed before the page loads, it aborts and records any request that leaves 127.0.0.1 (data:
    and blob: URLs are local), and records console errors, uncaught page errors and HTTP responses
    with status 400 or above. The caller asserts that the list is empty.
    """
    problems: list[str] = []

    def route(route):
        url = urlsplit(route.request.url)
        if url.scheme in ("data", "blob") or url.hostname == "127.0.0.1":
            route.continue_()
        else:
            problems.append(f"request leaves 127.0.0.1: {route.request.url}")
            route.abort()

    page.route("**/*", route)
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"console error: {msg.text}"))
    page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
    page.on("response", lambda resp: resp.status >= 400 and problems.append(f"HTTP {resp.status}: {resp.url}"))
    return problems


DESKTOP = {"width": 1280, "height": 900}
TABLET = {"width": 900, "height": 900}
PHONE = {"width": 390, "height": 844}


# A page that only sends the reader on (the site's root): its target.
REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)


@contextlib.contextmanager
def open_page(
    browser,
    base_url: str,
    path: str,
    viewport: dict = DESKTOP,
    mode: str = "light",
    before_load: Callable | None = None,
):
    """A page of the site in a fresh browser context of this size and theme, loaded (a redirect page:
    where it leads) and with its formulas typeset (the one way the browser tests open a page to
    look at it). ``before_load(page)`` runs before the page is requested (to install a guard)."""
    context = browser.new_context(viewport=viewport)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    page = context.new_page()
    try:
        if before_load is not None:
            before_load(page)
        page.goto(base_url + path)
        redirect = REDIRECT.search((SITE / path).read_text(errors="replace")) if (SITE / path).is_file() else None
        if redirect:
            page.wait_for_url(urljoin(base_url + path, redirect.group(1)), wait_until="load")
        page.wait_for_load_state("networkidle")
        if page.evaluate("document.querySelectorAll('.math').length"):
            page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=15000)
            page.evaluate("MathJax.startup.promise")
        yield page
    finally:
        context.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A page closed while a file was still being sent is normal in these tests.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve a folder on 127.0.0.1 at a free port, without a log line per request; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"the site is not built: {SITE / 'index.html'} is missing (run make book first)")
    return SITE


@pytest.fixture(scope="session")
def base_url(site: Path) -> Iterator[str]:
    with serve(site) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import Error, sync_playwright

    executable = find_chromium()
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        except Error as exc:
            pytest.fail(
                "no Chromium to run the browser test: install it (Debian/Ubuntu: apt-get install chromium "
                f"fonts-nanum; elsewhere: python -m playwright install chromium). Launch error: {exc}".splitlines()[0]
            )
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


# --- One visit per page, size and theme ------------------------------------------------------------
#
# Loading a chapter takes seconds (MathJax typesets every formula before the page is ready), and
# many tests only look at a loaded page without touching it. They register a probe for a kind of
# visit; the first test that needs a (kind, page) loads the page once and runs every probe of that
# kind on it; the results are shared by all tests and all pytest-xdist workers of the session.

VISITS = {
    "1280": (DESKTOP, "light"),
    "1280-dark": (DESKTOP, "dark"),
    "900": (TABLET, "light"),
    "phone": (PHONE, "light"),
}
PROBES: dict[str, dict[str, Callable]] = {kind: {} for kind in VISITS}


LAST: set[str] = set()  # probes that run after the guard's record is taken


def probe(*kinds: str, last: bool = False) -> Callable:
    """Register fn(page, page_path) -> JSON-able as a probe of these kinds of visit; it must leave the
    page as it found it (other probes run on the same page after it). A probe with ``last=True``
    runs after the others and after the guard's record of the visit is taken: for a tool whose own
    requests are not the page's (axe-core fetches the style sheets again, and resolves their
    @import against the site's root)."""

    def register(fn: Callable) -> Callable:
        name = f"{fn.__module__}.{fn.__name__}"
        for kind in kinds:
            PROBES[kind][name] = fn
        if last:
            LAST.add(name)
        return fn

    return register


def run_probes(browser, base_url: str, kind: str, page_path: str) -> dict:
    """Load the page once and run every probe of this kind on it. Every visit is guarded: what the
    page did wrong while it loaded and ran (guard()) and the requests that failed (with the address
    the page was at then, paths relative to the site) are kept under GUARDED; every address of the
    site the page asked for, under REQUESTED."""
    viewport, mode = VISITS[kind]
    guarded: dict[str, list] = {"problems": [], "failed": []}
    requested: set[str] = set()

    def before_load(page) -> None:
        guarded["problems"] = guard(page)  # filled while the page runs
        page.on("request", lambda req: req.url.startswith(base_url) and requested.add(relative(req.url, base_url)))

        def request_failed(req) -> None:
            at = relative(page.url, base_url)
            guarded["failed"].append({"url": relative(req.url, base_url), "failure": req.failure, "at": at})

        page.on("requestfailed", request_failed)

    found = {}
    with open_page(browser, base_url, page_path, viewport, mode, before_load=before_load) as page:
        for name, fn in sorted(PROBES[kind].items(), key=lambda item: (item[0] in LAST, item[0])):
            if name in LAST and GUARDED not in found:
                found[GUARDED] = {"value": {"problems": list(guarded["problems"]), "failed": list(guarded["failed"])}}
            try:
                found[name] = {"value": fn(page, page_path)}
            except Exception as exc:  # reported by the test that reads this probe
                found[name] = {"error": f"{type(exc).__name__}: {exc}"}
    found.setdefault(GUARDED, {"value": {"problems": list(guarded["problems"]), "failed": guarded["failed"]}})
    found[REQUESTED] = {"value": sorted(requested)}
    return found


GUARDED = "conftest.guarded"
REQUESTED = "conftest.requested"


# --- Visits kept between runs ------------------------------------------------------------------------
#
# What a visit finds is decided by what the browser was given: the bytes of every file of the site the
# page asked for (the page itself, its style sheets, scripts, fonts, images, and the page a redirect
# led to), the probes and tests (tests/site), the book's extensions and book/ruff.toml (which some
# probes read), the pinned packages (axe-core, Playwright: requirements.txt), the browser's version and
# flags, and the kind of visit. A visit is kept in _build/visit-cache with the digest of each of these,
# and a later run (make test again, in the same checkout) uses it instead of loading the page only if
# every digest is still the same: edit a chapter and only that chapter's visits run again; edit a
# style sheet that every page asks for and they all do. A visit that recorded a problem or a probe
# error is never kept. One file is left out of the key of every page but the search page: the search
# index (searchindex.js), which every page loads but only hands to Search.setIndex, and which changes
# with any word of any page (so that one edited sentence would load every page again); the search
# page's own visit keeps its digest, so an index that fails to load still fails there. A fresh clone
# (CI) has no cache. SITE_VISIT_CACHE=0 turns it off; SITE_SCREENSHOTS=1 does not read it (the
# screenshots are taken during the visit).
VISIT_CACHE = ROOT / "_build" / "visit-cache"


def resolve(site: Path, url_path: str) -> Path | None:
    """The file of the site that an address's path leads to (a folder: its index.html), or None."""
    target = site / unquote(url_path).lstrip("/")
    if target.is_dir():
        target = target / "index.html"
    return target if target.is_file() else None


def site_file_digest(site: Path, url_path: str) -> str:
    """The digest of what the test server sends for an address of the site: a file's bytes, a folder's
    index.html (or its listing), or "missing"."""
    path = urlsplit(url_path).path
    target = resolve(site, path)
    if target is not None:
        return hashlib.sha256(target.read_bytes()).hexdigest()
    folder = site / unquote(path).lstrip("/")
    return "folder:" + ",".join(sorted(p.name for p in folder.iterdir())) if folder.is_dir() else "missing"


def code_digest(browser_version: str) -> str:
    """The digest of everything but the site that a visit's result depends on."""
    digest = hashlib.sha256()
    # the tests and probes, the book's extensions some of them read (book/_ext), the notebooks' line
    # length (book/ruff.toml), the pins
    sources = sorted((ROOT / "tests" / "site").glob("*.py")) + sorted((ROOT / "book" / "_ext").glob("*.py"))
    for path in [*sources, ROOT / "book" / "ruff.toml", ROOT / "requirements.txt"]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps([browser_version, CHROMIUM_FLAGS, sys.version]).encode())
    return digest.hexdigest()


def kept_visit(cache: Path, site: Path, code: str, needed: Iterable[str] = ()) -> dict | None:
    """A kept visit's findings if the visit would give the same now, else None. ``needed``: the probes
    this run registered; a visit kept by a run that collected fewer test modules (``pytest
    tests/site/test_layout.py``) lacks the others' probes, and is visited again."""
    try:
        kept = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if kept.get("code") != code or not set(needed) <= set(kept.get("found", {})):
        return None
    if any(site_file_digest(site, path) != digest for path, digest in kept["files"].items()):
        return None
    return kept["found"]


SEARCH_INDEX = "/searchindex.js"
SEARCH_PAGE = "search.html"


def keep_visit(cache: Path, site: Path, code: str, found: dict, page_path: str) -> None:
    """Keep a visit that found no problem; the digests are of the files as they are after the visit
    (the search index's only on the search page, see above)."""
    guarded = found[GUARDED]["value"]
    if guarded["problems"] or guarded["failed"] or any("error" in result for result in found.values()):
        return
    requested = found[REQUESTED]["value"]
    if page_path != SEARCH_PAGE:
        requested = [path for path in requested if urlsplit(path).path != SEARCH_INDEX]
    files = {path: site_file_digest(site, path) for path in requested}
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"code": code, "files": files, "found": found}))
    partial.replace(cache)


def relative(url: str, base_url: str) -> str:
    """A URL of the test server as a path of the site (workers serve the site at different ports)."""
    return "/" + url.removeprefix(base_url) if url.startswith(base_url) else url


@pytest.fixture(scope="session")
def visit(browser, base_url, tmp_path_factory):
    """visit(kind, page_path, fn) -> what the probe fn found on that page in that kind of visit;
    visit.many(kind, pages, fn) -> {page: found}, loading first the pages no other worker is on.

    A worker loads a page no other worker is loading (a lock per kind and page) and writes what
    every probe found to a folder all workers share; then the others read it.
    """
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the workers' basetemps are siblings in one run's folder
    folder = shared / "visits"
    folder.mkdir(exist_ok=True)
    use_cache = os.environ.get("SITE_VISIT_CACHE", "1") != "0"
    read_cache = use_cache and os.environ.get("SITE_SCREENSHOTS") != "1"
    code = code_digest(browser.version)

    def load(kind: str, page_path: str, wait: bool) -> dict | None:
        name = f"{kind}--{page_path.replace('/', '__')}.json"
        path = folder / name
        with open(path.with_suffix(".lock"), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return None  # another worker is loading it
            if not path.exists():
                found = kept_visit(VISIT_CACHE / name, SITE, code, PROBES[kind]) if read_cache else None
                if found is None:
                    found = run_probes(browser, base_url, kind, page_path)
                    if use_cache:
                        keep_visit(VISIT_CACHE / name, SITE, code, found, page_path)
                path.write_text(json.dumps(found))
            return json.loads(path.read_text())

    def value(found: dict, fn: Callable, kind: str, page_path: str):
        result = found[f"{fn.__module__}.{fn.__name__}"]
        if "error" in result:
            pytest.fail(f"{page_path} ({kind}): {fn.__name__} failed: {result['error']}")
        return result["value"]

    class Visit:
        def __call__(self, kind: str, page_path: str, fn: Callable):
            return value(load(kind, page_path, wait=True), fn, kind, page_path)

        def guarded(self, kind: str, page_path: str) -> dict:
            """What the guard saw during the visit: {"problems": [...], "failed": [requests]}."""
            return load(kind, page_path, wait=True)[GUARDED]["value"]

        def many(self, kind: str, pages: list[str], fn: Callable) -> dict:
            found = {page: load(kind, page, wait=False) for page in pages}
            for page in pages:
                if found[page] is None:
                    found[page] = load(kind, page, wait=True)
            return {page: value(found[page], fn, kind, page) for page in pages}

    return Visit()


def pytest_collection_modifyitems(items) -> None:
    """The tests of one page go to one pytest-xdist worker (with --dist loadgroup, as make test-site
    runs them): the first of them loads the page's visits, and no worker waits for another to finish
    loading a page it needs as well."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        page = callspec.params.get("page_path") if callspec else None
        if isinstance(page, str):
            item.add_marker(pytest.mark.xdist_group(page))
