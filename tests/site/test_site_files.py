"""What book/_ext/site_files.py, setup_cells.py and offline_mathjax.py do to the built site:

- the copy button of code cells, the solution dropdowns' button and the print-only contents of
  each page are labelled in Korean (these strings are not gettext messages);
- the entry page (index.html) is Korean, has the book's title and icon, and lands on the
  introduction with no failed request (it used to cost a /favicon.ico 404);
- a Korean 404.html links to pages that exist;
- each chapter's set-up cell is folded into a closed <details> with a Korean one-line summary;
- the download menu offers the book's PDF edition, not a print of the page.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
import yaml

from conftest import ROOT, guard, open_page, probe, site_pages

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())

HANGUL = re.compile(r"[\uac00-\ud7a3]")
CHAPTERS = [p for p in site_pages() if re.fullmatch(r"book/\d\d_\w+\.html", p) and "12_summary" not in p]


def test_no_english_label_is_left_in_the_built_files(site):
    pages = [site / p for p in site_pages()]
    assert pages
    assert not [p.name for p in pages if 'aria-label="Page"' in p.read_text(encoding="utf-8")]
    toggle = (site / "_static" / "togglebutton.js").read_text(encoding="utf-8")
    assert "Toggle hidden content" not in toggle and 'aria-label="숨긴 내용 펼치기"' in toggle
    copy = (site / "_static" / "copybutton.js").read_text(encoding="utf-8")
    assert re.search(r"'ko': \{\s*'copy': '복사'", copy)


def test_copy_and_dropdown_buttons_speak_korean(browser, base_url):
    with open_page(browser, base_url, "book/02_sinusoidal.html") as page:
        labels = page.evaluate(
            """() => ({
                copy: Array.from(document.querySelectorAll('button.copybtn')).map(b => b.dataset.tooltip),
                icon: Array.from(document.querySelectorAll('button.copybtn svg title')).map(t => t.textContent),
                toggle: Array.from(document.querySelectorAll('button.toggle-button'))
                    .map(b => b.getAttribute('aria-label')),
            })"""
        )
        page.locator("button.copybtn").nth(1).click(force=True)
        after = page.locator("button.copybtn").nth(1).get_attribute("data-tooltip")
    assert labels["copy"] and set(labels["copy"]) == {"복사"}, labels["copy"][:3]
    assert labels["icon"] and all(HANGUL.search(t) for t in labels["icon"]), labels["icon"][:3]
    assert labels["toggle"] and set(labels["toggle"]) == {"숨긴 내용 펼치기"}, labels["toggle"][:3]
    assert after in ("복사했습니다", "복사하지 못했습니다"), after  # headless may refuse the clipboard


def test_entry_page_is_korean_and_lands_on_the_introduction(site, browser, base_url):
    text = (site / "index.html").read_text(encoding="utf-8")
    assert '<html lang="ko">' in text and re.search(r"<title>[^<]*[\uac00-\ud7a3][^<]*</title>", text)
    icon = re.search(r'<link rel="icon" href="([^"]+)"', text)
    assert icon and (site / icon.group(1)).is_file()
    page = browser.new_page()
    problems = guard(page)  # every request: a 404 (such as /favicon.ico) is a problem
    try:
        page.goto(base_url)
        page.wait_for_url("**/book/intro.html")
        page.wait_for_load_state("networkidle")
    finally:
        page.close()
    assert not problems, problems


def test_the_404_page_is_korean_and_links_to_pages_that_exist(site):
    text = (site / "404.html").read_text(encoding="utf-8")
    assert '<html lang="ko">' in text and "페이지를 찾을 수 없습니다" in text
    links = re.findall(r'href="([^"]+)"', text)
    assert len(links) >= 3  # the icon, the introduction, the search
    # On GitHub Pages the site lives under /<repository>/; every link is an absolute path there.
    roots = {urlsplit(link).path.split("/")[1] for link in links}
    assert len(roots) == 1, links
    for link in links:
        assert link.startswith("/"), link
        assert (site / link.split("/", 2)[2]).is_file(), link


@probe("1280")
def set_up_fold(page, page_path: str) -> dict:
    """The folded set-up cells, the first one's summary, state and code, opened and closed again."""
    folds = page.locator("details.setup-cell")
    found = {"count": folds.count()}
    if found["count"]:
        fold = folds.first
        code = fold.locator("pre")
        found |= {
            "summary": fold.locator("summary").inner_text(),
            "closed": not fold.evaluate("d => d.open") and not code.is_visible(),
            "code": code.text_content(),
        }
        fold.locator("summary").click()
        found["opens"] = code.is_visible()
    found["first_code"] = page.evaluate("document.querySelector('div.cell pre')?.innerText ?? ''")
    if found["count"]:
        folds.first.evaluate("d => { d.open = false; }")  # as it was, for the next probe
    return found


@pytest.mark.parametrize("page_path", CHAPTERS)
def test_the_set_up_cell_is_folded_with_a_korean_summary(page_path, visit):
    found = visit("1280", page_path, set_up_fold)
    assert found["count"] == 1, f"{page_path}: {found['count']} folded set-up cells"
    assert HANGUL.search(found["summary"]) and "posenc" in found["summary"]
    assert found["closed"]
    assert found["code"].startswith("# Set-up:")  # the whole cell is kept, only folded
    assert found["opens"]
    # no other cell is folded, and the set-up cell is the first code cell
    assert found["first_code"].startswith("# Set-up:")


@pytest.mark.parametrize("page_path", ["book/intro.html", "book/06_rope.html"])
def test_the_download_menu_offers_the_book_pdf(page_path, site, browser, base_url):
    assert (site / CONFIG["sphinx"]["config"]["book_pdf"]).is_file(), "the site has no PDF edition (make pdf)"
    with open_page(browser, base_url, page_path) as page:
        menu = page.locator(".dropdown-download-buttons")
        assert "window.print" not in menu.inner_html()
        page.locator(".dropdown-download-buttons button").first.click()
        link = menu.locator("a", has_text="책 전체 PDF")
        assert link.is_visible()
        response = page.request.get(link.evaluate("a => a.href"))
        assert response.ok and response.headers["content-type"] == "application/pdf"


@pytest.mark.parametrize("page_path", ["book/intro.html", "book/06_rope.html", "search.html"])
def test_the_download_menu_offers_the_chapter_pdf(page_path, site, browser, base_url):
    """A page of the book offers its own PDF (tools/build_pdf.py cuts it from the book's) beside the
    book's; the search page, which is not in the book, offers none."""
    with open_page(browser, base_url, page_path) as page:
        menu = page.locator(".dropdown-download-buttons")
        links = menu.locator("a", has_text="이 장 PDF")
        if page_path == "search.html":
            assert links.count() == 0
            return
        page.locator(".dropdown-download-buttons button").first.click()
        assert links.count() == 1 and links.first.is_visible()
        href = links.first.evaluate("a => a.href")
        assert href.endswith(f"/pdf/{page_path.split('/')[-1].removesuffix('.html')}.pdf"), href
        response = page.request.get(href)
        assert response.ok and response.headers["content-type"] == "application/pdf", href
