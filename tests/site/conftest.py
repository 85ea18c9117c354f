"""Fixtures for the browser test: the built site served on 127.0.0.1, and headless Chromium."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A page closed while a file was still being sent is normal in these tests.
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.fail(f"the site is not built: {SITE / 'index.html'} is missing (run make book first)")
    return SITE


@pytest.fixture(scope="session")
def base_url(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


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
