"""How Korean readers use the site: search, light and dark themes, phones, figures.

Screenshots for review are saved under _build/screenshots/: the search results page, a
figure-heavy page in the light and the dark theme, and a page at phone size.
"""

from __future__ import annotations

import html as html_lib
import importlib.util
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from PIL import Image

from conftest import ROOT, SCREENSHOTS, SITE, open_page, probe

CHAPTERS = sorted(str(p.relative_to(SITE)) for p in (SITE / "book").glob("*.html")) if SITE.is_dir() else []
FIGURE_PAGE = "book/02_sinusoidal.html"
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def _korean_search_module():
    spec = importlib.util.spec_from_file_location("korean_search", ROOT / "book" / "_ext" / "korean_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_prose(page: str) -> str:
    """The text of a page's article, without code blocks and outputs."""
    text = (SITE / page).read_text()
    article = re.search(r'<article class="bd-article".*?</article>', text, re.S)
    body = re.sub(r"<pre.*?</pre>", " ", article.group(0) if article else "", flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", body))


def pages_with_word(word: str) -> set[str]:
    """Pages whose prose has the word alone or followed by one particle (any case for Latin words)."""
    particles = "|".join(_korean_search_module().PARTICLES)
    pattern = re.compile(rf"(?<![\w]){re.escape(word)}(?:{particles})?(?![\w])", re.IGNORECASE)
    return {page for page in CHAPTERS if pattern.search(page_prose(page))}


def search(browser, base_url: str, query: str, screenshot: Path | None = None) -> set[str]:
    page = browser.new_page()
    try:
        page.goto(f"{base_url}search.html?q={quote(query)}")
        page.wait_for_function(
            "() => { const s = document.querySelector('#search-results p.search-summary');"
            " return s && s.innerText.trim().length > 0; }",
            timeout=20000,
        )
        hrefs = page.evaluate(
            "Array.from(document.querySelectorAll('#search-results ul.search li a')).map(a => a.href)"
        )
        if screenshot:
            page.screenshot(path=str(screenshot), full_page=True)
        return {urlsplit(h).path.lstrip("/") for h in hrefs}
    finally:
        page.close()


@pytest.mark.parametrize(
    ("query", "must_find"),
    [
        ("트랜스포머", {"book/intro.html", "book/01_why_position.html"}),
        ("위치", {f"book/0{n}_" for n in range(1, 9)}),
        ("회전", {"book/02_sinusoidal.html", "book/06_rope.html"}),
        ("RoPE", {"book/02_sinusoidal.html", "book/04_relative.html"}),  # they only say RoPE다, RoPE는
    ],
)
def test_korean_search_finds_inflected_forms(query, must_find, browser, base_url, screenshots):
    shot = screenshots / "search-results.png" if query == "트랜스포머" else None
    found = search(browser, base_url, query, shot)
    expected = pages_with_word(query)
    assert expected, f"no page mentions {query}"
    assert expected <= found, f"search for {query} missed {sorted(expected - found)}"
    for page in must_find:  # named pages (prefixes for whole chapters) must be among the results
        assert any(f.startswith(page) for f in found), f"search for {query} did not list {page}"


def test_search_for_nonsense_finds_nothing_and_says_so_in_korean(browser, base_url):
    assert search(browser, base_url, "쀍뷁햏") == set()
    page = browser.new_page()
    try:
        page.goto(f"{base_url}search.html?q={quote('쀍뷁햏')}")
        page.wait_for_function(
            "() => { const s = document.querySelector('#search-results p.search-summary');"
            " return s && s.innerText.trim().length > 0; }",
            timeout=20000,
        )
        summary = page.evaluate("document.querySelector('#search-results').innerText")
    finally:
        page.close()
    assert HANGUL.search(summary) and not re.search(r"[A-Za-z]{4,}", summary), summary


@probe("1280")
def figure_descriptions(page, page_path: str) -> list:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('article img'))
             .filter(i => i.src.includes('/_images/'))
             .map(i => [i.src.split('/').pop(), i.alt || '',
                        (i.closest('figure')?.querySelector('figcaption')?.innerText) || ''])"""
    )


def test_figures_are_opaque_images_with_korean_descriptions(visit):
    images = sorted((SITE / "_images").glob("*.png"))
    assert images, "the site has no figures"
    for path in images:
        with Image.open(path) as image:
            if "A" in image.getbands():
                assert image.getchannel("A").getextrema()[0] == 255, f"{path.name} has transparent pixels"
    described = visit.many("1280", CHAPTERS, figure_descriptions)
    assert any(described.values()), "no figure found on any chapter"
    for chapter, figures in described.items():
        for src, alt, caption in figures:
            assert HANGUL.search(alt) or HANGUL.search(caption), (
                f"{chapter}: figure {src} has no Korean alt text or caption"
            )


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_figure_page_in_both_themes(mode, browser, base_url, screenshots):
    with open_page(browser, base_url, FIGURE_PAGE, mode=mode) as page:
        assert page.evaluate("document.documentElement.dataset.theme") == mode
        backgrounds = page.evaluate(
            """() => Array.from(document.querySelectorAll('article img'))
                 .filter(i => i.src.includes('/_images/'))
                 .map(i => { const c = document.createElement('canvas');
                             c.width = i.naturalWidth; c.height = i.naturalHeight;
                             const g = c.getContext('2d'); g.drawImage(i, 0, 0);
                             return g.getImageData(1, 1, 1, 1).data[3]; })"""
        )
        assert backgrounds and all(alpha == 255 for alpha in backgrounds)  # figures paint their own background
        page.screenshot(path=str(screenshots / f"theme-{mode}.png"), full_page=True)


@probe("phone")
def phone_overflow(page, page_path: str) -> dict:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    culprits = page.evaluate(
        """() => { const scrolls = e => { for (let a = e.parentElement; a; a = a.parentElement) {
                     const o = getComputedStyle(a).overflowX; if (o !== 'visible') return true; } return false; };
                   return Array.from(document.querySelectorAll('article *'))
                     .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !scrolls(e))
                     .slice(0, 5)
                     .map(e => e.tagName.toLowerCase() + '.' + e.className + ': ' + e.innerText.slice(0, 40)); }"""
    )
    if page_path == "book/04_relative.html":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "phone.png"), full_page=True)
    return {"overflow": overflow, "culprits": culprits}


@pytest.mark.parametrize("page_path", [*CHAPTERS, "search.html"])
def test_no_horizontal_overflow_on_a_phone(page_path, visit, screenshots):
    found = visit("phone", page_path, phone_overflow)
    overflow, culprits = found["overflow"], found["culprits"]
    assert overflow <= 1, f"{page_path} is {overflow}px wider than a phone screen: {culprits}"


@probe("phone")
def display_equations(page, page_path: str) -> list[dict]:
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('article mjx-container[display="true"]')).map(c => {
             const box = c.getBoundingClientRect(), math = c.querySelector('mjx-math').getBoundingClientRect();
             const number = c.closest('div.math')?.querySelector('span.eqno');
             const n = number ? number.getBoundingClientRect() : null;
             const beside = n && n.width > 0 && n.top < box.bottom - 1 && n.bottom > box.top + 1;
             return {id: c.closest('div.math')?.id || '?', width: math.width, visible: box.width,
                     scrollWidth: c.scrollWidth, overflow: getComputedStyle(c).overflowX,
                     inside: box.left >= -1 && box.right <= window.innerWidth + 1, numberBeside: !!beside};
           })"""
    )


@pytest.mark.parametrize("page_path", [c for c in CHAPTERS if '<div class="math' in (SITE / c).read_text()])
def test_display_equations_fit_or_scroll_on_a_phone(page_path, visit):
    """Every display equation fits its box or scrolls inside it; its number sits on its own line."""
    boxes = visit("phone", page_path, display_equations)
    assert boxes, f"{page_path}: no display equation found"
    problems = []
    for b in boxes:
        fits = b["width"] <= b["visible"] + 1
        scrolls = b["overflow"] in ("auto", "scroll") and b["scrollWidth"] >= b["width"] - 1
        if not b["inside"] or not (fits or scrolls):
            problems.append(f"{b['id']} is clipped ({b['width']:.0f}px of math in a {b['visible']:.0f}px box)")
        if b["numberBeside"]:
            problems.append(f"{b['id']}: the equation number sits beside the equation and narrows it")
    assert not problems, f"{page_path}: {problems}"


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", "", fragment))).strip()


def test_bibliography_labels_read_as_the_citations_in_the_text():
    """A reader who follows "[Vaswani et al., 2017]" finds that label in the list, not a number
    (book/_ext/bib_labels.py)."""
    listing = (SITE / "book" / "bibliography.html").read_text()
    labels = {
        _text(m)
        for m in re.findall(
            r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<span class="fn-bracket">\]</span></span>',
            listing,
        )
    }
    assert len(labels) >= 30, f"only {len(labels)} labels in the bibliography"
    numbered = sorted(label for label in labels if label.isdigit())
    assert not numbered, f"numbered labels: {numbered[:5]}"
    cited, missing = 0, set()
    for page in CHAPTERS:
        for fragment in re.findall(r'href="bibliography\.html#[^"]*"[^>]*>(.*?)</a>', (SITE / page).read_text()):
            text = _text(fragment)
            if re.fullmatch(r"\d{4}", text):
                continue  # a second year of one author: "Chen et al., 2023, 2024"
            cited += 1
            if text not in labels:
                missing.add(text)
    assert cited >= 50, f"only {cited} citations found"
    assert not missing, f"citations with no such label in the bibliography: {sorted(missing)}"
