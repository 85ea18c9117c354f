"""Open every page of the built site in headless Chromium and check what a reader sees.

A page fails on: a console error or uncaught page error; any request that leaves 127.0.0.1;
a failed request or an HTTP error; a formula that MathJax did not render (or rendered as an
error) or raw TeX left in the text; an image that did not load; an internal link whose page
or anchor does not exist; a missing or wrong Colab link on a notebook page (or one on a page
that is not a notebook); a language other than Korean. With SITE_SCREENSHOTS=1 (make test-site
SITE_SCREENSHOTS=1; the book workflow keeps them as an artifact), each page is also saved as a
full-page screenshot under _build/screenshots/: 2-4 s a page, for people to look at, not a check.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml

from conftest import REDIRECT, ROOT, SCREENSHOTS, probe, resolve, site_pages

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PAGES = site_pages()
NOTEBOOK_PAGES = {
    str(p.relative_to(ROOT).with_suffix(".html")): str(p.relative_to(ROOT))
    for p in (ROOT / "book").rglob("*.ipynb")
    if ".ipynb_checkpoints" not in p.parts
}
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[A-Za-z\\{]")


def colab_url(notebook: str) -> str:
    owner_repo = CONFIG["repository"]["url"].removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{owner_repo}/blob/{CONFIG['repository']['branch']}/{notebook}"


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    html = path.read_text(errors="replace")
    return frozenset(unquote(m) for m in re.findall(r'\b(?:id|name)="([^"]+)"', html))


def test_the_site_has_the_expected_pages(site):
    assert "index.html" in PAGES and "search.html" in PAGES
    for page in NOTEBOOK_PAGES:
        assert page in PAGES, f"{page} was not built"


def failed_requests(site: Path, page_path: str, failed: list[dict]) -> list[str]:
    """The failed requests of a visit, but those a redirect page left behind: one of its own links
    (its icon), aborted when the page was left, asking for a file that exists in the site."""
    html = (site / page_path).read_text(errors="replace")
    own = {urlsplit(urljoin("/" + page_path, ref)).path for ref in re.findall(r'(?:href|src)="([^"]+)"', html)}
    problems = []
    for req in failed:
        path = urlsplit(req["url"]).path
        left_behind = REDIRECT.search(html) and req["failure"] == "net::ERR_ABORTED" and path in own
        if left_behind and resolve(site, path) is not None:
            continue
        problems.append(f"request failed: {req['url']} ({req['failure']})")
    return problems


@probe("1280")
def what_a_reader_sees(page, page_path: str) -> dict:
    """On the loaded page (formulas typeset): its language, formulas, raw TeX, images, links and
    Colab links; and, if asked for, a full-page screenshot. Addresses of the site as paths (workers
    differ in port)."""
    found = {"lang": page.evaluate("document.documentElement.lang")}
    found["n_math"] = page.evaluate("document.querySelectorAll('.math').length")
    found["n_rendered"] = page.evaluate("document.querySelectorAll('mjx-container').length")
    found["n_errors"] = page.evaluate("document.querySelectorAll('mjx-merror').length")
    found["prose"] = page.evaluate(
        """() => { const body = document.querySelector('main') || document.body;
                   const copy = body.cloneNode(true);
                   copy.querySelectorAll('pre, code, mjx-container, script, style').forEach(e => e.remove());
                   return copy.innerText; }"""
    )
    # Images: force lazy ones to load, then every image must have decoded pixels.
    page.evaluate(
        """() => Promise.all(Array.from(document.images).map(img => {
               img.loading = 'eager'; return img.decode().catch(() => null); }))"""
    )
    found["not_loaded"] = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
    )
    found["links"] = page.evaluate(
        """() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)
                 .filter(h => h.startsWith(location.origin + '/'))
                 .map(h => h.slice(location.origin.length))"""
    )
    found["colab"] = page.evaluate(
        "Array.from(document.querySelectorAll('a[href^=\"https://colab.research.google.com\"]')).map(a => a.href)"
    )
    if os.environ.get("SITE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(
            path=str(SCREENSHOTS / (page_path.replace("/", "__").removesuffix(".html") + ".png")), full_page=True
        )
    return found


@pytest.mark.parametrize("page_path", PAGES)
def test_page(page_path, site, visit):
    found = visit("1280", page_path, what_a_reader_sees)
    guarded = visit.guarded("1280", page_path)
    problems = list(guarded["problems"])
    # Stricter than the guard: a request that fails without an HTTP status (a refused connection,
    # an aborted load) also fails the page. One exception: a redirect page (the site's root) is
    # left at once, and leaving it aborts what it was still loading (its icon); such a request
    # passes if it is one of that page's own links and what it asked for exists in the site.
    problems += failed_requests(site, page_path, guarded["failed"])

    if found["lang"] != "ko":
        problems.append("page language is not ko")
    if found["n_math"]:
        if found["n_rendered"] < found["n_math"]:
            problems.append(f"{found['n_math']} formulas but only {found['n_rendered']} rendered")
        if found["n_errors"]:
            problems.append("MathJax reported an error in a formula")
    prose = found["prose"]
    for match in RAW_TEX.finditer(prose):
        problems.append(f"raw TeX left in the text: ...{prose[max(0, match.start() - 30) : match.end() + 30]!r}...")
    problems += [f"image not loaded: {src}" for src in found["not_loaded"]]

    # Internal links: the target file exists, and so does the anchor it points to.
    for href in found["links"]:
        parts = urlsplit(href)
        target = resolve(site, parts.path)
        if target is None:
            problems.append(f"broken link: {href}")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in anchors(target):
            problems.append(f"link to a missing anchor: {href}")

    # Colab: exactly the link that opens this page's notebook, and none on other pages.
    colab = found["colab"]
    if page_path in NOTEBOOK_PAGES:
        if set(colab) != {colab_url(NOTEBOOK_PAGES[page_path])}:
            problems.append(f"Colab links {colab}, expected {colab_url(NOTEBOOK_PAGES[page_path])}")
    elif colab:
        problems.append(f"a Colab link on a page that is not a notebook: {colab}")

    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


CHAPTERS = [p for p in PAGES if p.startswith("book/")]


@pytest.mark.parametrize(
    ("kind", "page_path"),
    [("1280-dark", p) for p in PAGES] + [(kind, p) for kind in ("900", "phone") for p in CHAPTERS],
)
def test_page_has_no_error_at_other_sizes_and_in_the_dark(kind, page_path, site, visit):
    """The other visits the browser tests make (conftest.VISITS) are guarded too: no console or page
    error, no failed request, no request that leaves 127.0.0.1, in the dark theme and at 900 px and
    on a phone (test_page checks the 1280-px light visit)."""
    guarded = visit.guarded(kind, page_path)
    problems = guarded["problems"] + failed_requests(site, page_path, guarded["failed"])
    assert not problems, f"{page_path} ({kind}):\n  " + "\n  ".join(problems)
