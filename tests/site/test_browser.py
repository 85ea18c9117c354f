"""Open every page of the built site in headless Chromium and check what a reader sees.

A page fails on: a console error or uncaught page error; any request that leaves 127.0.0.1;
a failed request or an HTTP error; a formula that MathJax did not render (or rendered as an
error) or raw TeX left in the text; an image that did not load; an internal link whose page
or anchor does not exist; a missing or wrong Colab link on a notebook page (or one on a page
that is not a notebook); a language other than Korean. Each page is saved as a full-page
screenshot under _build/screenshots/.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from conftest import ROOT, guard, site_pages

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PAGES = site_pages()
NOTEBOOK_PAGES = {
    str(p.relative_to(ROOT).with_suffix(".html")): str(p.relative_to(ROOT))
    for p in (ROOT / "book").rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
}
REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[A-Za-z\\{]")


def colab_url(notebook: str) -> str:
    owner_repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{CONFIG['repository']['branch']}/{notebook}"


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    html = path.read_text(errors="replace")
    return frozenset(unquote(m) for m in re.findall(r'\b(?:id|name)="([^"]+)"', html))


def resolve(site: Path, url_path: str) -> Path | None:
    target = site / unquote(url_path).lstrip("/")
    if target.is_dir():
        target = target / "index.html"
    return target if target.is_file() else None


def test_the_site_has_the_expected_pages(site):
    assert "index.html" in PAGES and "search.html" in PAGES
    for page in NOTEBOOK_PAGES:
        assert page in PAGES, f"{page} was not built"


@pytest.mark.parametrize("page_path", PAGES)
def test_page(page_path, site, base_url, browser, screenshots):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = guard(page)
    # Stricter than the guard: a request that fails without an HTTP status (a refused connection,
    # an aborted load) also fails the page. One exception: a redirect page (the site's root) is
    # left at once, and leaving it aborts what it was still loading (its icon); such a request
    # passes if what it asked for exists in the site.
    redirect = REDIRECT.search((site / page_path).read_text(errors="replace"))
    landed = not redirect

    def request_failed(req):
        left_behind = not landed and req.failure == "net::ERR_ABORTED" and req.url.startswith(base_url)
        if left_behind and resolve(site, urlsplit(req.url).path) is not None:
            return
        problems.append(f"request failed: {req.url} ({req.failure})")

    page.on("requestfailed", request_failed)

    try:
        page.goto(base_url + page_path, wait_until="load")
        # The site's root is a redirect to the first page: follow it, then check where it lands.
        if redirect:
            page.wait_for_url(urljoin(base_url + page_path, redirect.group(1)), wait_until="load")
            landed = True
        # Let late requests (the favicon, fonts, scripts loaded by scripts) finish and be checked.
        page.wait_for_load_state("networkidle")

        assert page.evaluate("document.documentElement.lang") == "ko", "page language is not ko"

        # Formulas: wait for MathJax to finish typesetting, then look for what it left behind.
        n_math = page.evaluate("document.querySelectorAll('.math').length")
        if n_math:
            page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=15000)
            page.evaluate("MathJax.startup.promise")
            n_rendered = page.evaluate("document.querySelectorAll('mjx-container').length")
            if n_rendered < n_math:
                problems.append(f"{n_math} formulas but only {n_rendered} rendered")
            if page.evaluate("document.querySelectorAll('mjx-merror').length"):
                problems.append("MathJax reported an error in a formula")
        prose = page.evaluate(
            """() => { const body = document.querySelector('main') || document.body;
                       const copy = body.cloneNode(true);
                       copy.querySelectorAll('pre, code, mjx-container, script, style').forEach(e => e.remove());
                       return copy.innerText; }"""
        )
        for match in RAW_TEX.finditer(prose):
            problems.append(f"raw TeX left in the text: ...{prose[max(0, match.start() - 30) : match.end() + 30]!r}...")

        # Images: force lazy ones to load, then every image must have decoded pixels.
        page.evaluate(
            """() => Promise.all(Array.from(document.images).map(img => {
                   img.loading = 'eager'; return img.decode().catch(() => null); }))"""
        )
        for src in page.evaluate(
            "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
        ):
            problems.append(f"image not loaded: {src}")

        # Internal links: the target file exists, and so does the anchor it points to.
        origin = base_url.rstrip("/")
        for href in page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"):
            if not href.startswith(origin):
                continue
            parts = urlsplit(href)
            target = resolve(site, parts.path)
            if target is None:
                problems.append(f"broken link: {href}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in anchors(target):
                problems.append(f"link to a missing anchor: {href}")

        # Colab: exactly the link that opens this page's notebook, and none on other pages.
        colab = page.evaluate(
            "Array.from(document.querySelectorAll('a[href^=\"https://colab.research.google.com\"]')).map(a => a.href)"
        )
        if page_path in NOTEBOOK_PAGES:
            if set(colab) != {colab_url(NOTEBOOK_PAGES[page_path])}:
                problems.append(f"Colab links {colab}, expected {colab_url(NOTEBOOK_PAGES[page_path])}")
        elif colab:
            problems.append(f"a Colab link on a page that is not a notebook: {colab}")

        page.screenshot(
            path=str(screenshots / (page_path.replace("/", "__").removesuffix(".html") + ".png")), full_page=True
        )
    finally:
        context.close()

    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)
