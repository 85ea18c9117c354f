"""What the browser tests share: the built site served on 127.0.0.1, headless Chromium, the list
of the site's pages, and the guard that records what a page did wrong.

tools/build_pdf.py imports this module too (CHROMIUM_FLAGS, find_chromium, serve), so that the PDF
edition is printed by the same browser, with the same flags, from the same kind of server.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

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


@contextlib.contextmanager
def open_page(browser, base_url: str, path: str, viewport: dict = DESKTOP, mode: str = "light"):
    """A page of the site in a fresh browser context of this size and theme, loaded and with its
    formulas typeset (the one way the browser tests open a page to look at it)."""
    context = browser.new_context(viewport=viewport)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    page = context.new_page()
    try:
        page.goto(base_url + path)
        page.wait_for_load_state("networkidle")
        if page.evaluate("document.querySelectorAll('.math').length"):
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
