"""The site's interface speaks Korean: no English interface string, no broken author line.

The themes pass their interface strings through gettext, and their Korean catalogs are
incomplete (book/_ext/korean_ui.py fills them in). This test keeps the list of English strings
a reader met before that fix, plus every string the extension translates, and fails when any of
them is visible on a page or is the accessible name (title, aria-label, placeholder, alt) of an
element. Print-only parts of the page (never rendered on screen) are left out.

It also checks the footer's author line and that search result snippets show formulas as
readable text rather than TeX source.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import yaml

from conftest import ROOT, open_page, probe, site_pages

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
PAGES = site_pages()


def _korean_ui():
    spec = importlib.util.spec_from_file_location("korean_ui", ROOT / "book" / "_ext" / "korean_ui.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KOREAN_UI = _korean_ui()
# Strings that are not gettext message ids but were on the pages in English.
SEEN_IN_ENGLISH = {
    "Search this book...",
    "Search the docs ...",
    "Launch on Colab",
    "Toggle primary sidebar",
    "Toggle secondary sidebar",
    "Colab logo",
    "전체 화면으로보기",
}
ENGLISH = sorted(
    ({k for k in KOREAN_UI.TRANSLATIONS if "%(" not in k and k != "logo"} | SEEN_IN_ENGLISH),
    key=len,
    reverse=True,
)

# Every element's accessible strings and the page's visible text outside the article (the book's
# own prose may name things in English: "RoPE", "Colab").
COLLECT = """
() => {
  const printOnly = (el) => el.closest('#jb-print-docs-body, .onlyprint');
  const names = [];
  for (const el of document.querySelectorAll('[title], [aria-label], [placeholder], [alt], [data-bs-title]')) {
    if (printOnly(el)) continue;
    for (const attr of ['title', 'aria-label', 'placeholder', 'alt', 'data-bs-title']) {
      const value = el.getAttribute(attr);
      if (value && !el.closest('article .bd-article, .bd-article')) names.push(value.trim());
    }
  }
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('article, script, style, #jb-print-docs-body, .onlyprint, kbd').forEach(e => e.remove());
  const texts = [];
  const walker = document.createTreeWalker(clone, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) { const t = walker.currentNode.textContent.trim(); if (t) texts.push(t); }
  const author = document.querySelector('.component-author');
  return {names, texts, author: author ? author.innerText.trim() : null};
}
"""


def english_strings(values: list[str]) -> set[str]:
    """The listed English strings that appear in the values (whole-word for short ones)."""
    found = set()
    for value in values:
        for english in ENGLISH:
            if len(english) <= 8:
                if re.search(rf"(?<![A-Za-z]){re.escape(english)}(?![A-Za-z])", value) and not re.search(
                    r"[\uac00-\ud7a3]", value
                ):
                    found.add(english)
            elif english in value:
                found.add(english)
    return found


def test_the_list_of_english_strings_catches_a_planted_one():
    assert english_strings(["Toggle primary sidebar"]) == {"Toggle primary sidebar"}
    assert "next page" in english_strings(["next page"])
    assert english_strings(["Dark"]) == {"Dark"}
    assert english_strings(["다음 페이지", "어둡게"]) == set()


@probe("1280")
def interface_strings(page, page_path: str) -> dict:
    return page.evaluate(COLLECT)


@pytest.mark.parametrize("page_path", PAGES)
def test_interface_is_korean(page_path, visit):
    found = visit("1280", page_path, interface_strings)
    problems = []
    if english := english_strings(found["names"]):
        problems.append(f"English accessible names: {sorted(english)}")
    if english := english_strings(found["texts"]):
        problems.append(f"English interface text: {sorted(english)}")
    if found["author"] is not None and found["author"] != f"지은이: {CONFIG['author']}":
        problems.append(f"author line reads {found['author']!r}")
    raw_tex = [t for t in found["texts"] if re.search(r"\\\(|\\\[|\$\$", t)]
    if raw_tex:
        problems.append(f"raw TeX outside the article: {raw_tex[:3]}")
    assert not problems, f"{page_path}: " + "; ".join(problems)


def test_search_snippets_show_formulas_as_text(browser, base_url):
    page = browser.new_page()
    try:
        page.goto(f"{base_url}search.html?q=행렬")
        page.wait_for_function(
            "() => document.querySelectorAll('#search-results ul.search li p.context').length > 0", timeout=20000
        )
        sample = r'<div role="main"><p>크기 \\(n \\times d\\) 행렬, \\(\\theta_i\\)</p></div>'
        converted = page.evaluate(f"Search.htmlToText('{sample}')")
        snippets = page.evaluate(
            "Array.from(document.querySelectorAll('#search-results ul.search li p.context')).map(p => p.innerText)"
        )
    finally:
        page.close()
    assert converted == "크기 n \N{MULTIPLICATION SIGN} d 행렬, θ_i"
    assert snippets
    assert not [s for s in snippets if re.search(r"\\\(|\\\)|\\times|\\frac|\$\$", s)], snippets


def test_formulas_open_no_english_menu_and_display_formulas_take_focus(browser, base_url):
    """MathJax's context menu is English only, so it is off (book/_ext/offline_mathjax.py); a
    right-click on a formula opens nothing. Every display formula keeps a tab stop
    (book/_static_files/math_focus.js), so one that scrolls sideways can be reached by keyboard."""
    with open_page(browser, base_url, "book/06_rope.html") as page:
        page.wait_for_function(
            "document.querySelectorAll('mjx-container[display=\"true\"]').length > 0"
            " && Array.from(document.querySelectorAll('mjx-container[display=\"true\"]'))"
            ".every(f => f.getAttribute('tabindex') === '0')",
            timeout=15000,
        )
        page.locator('article mjx-container[display="true"]:visible').first.click(button="right")
        page.wait_for_timeout(300)
        menus = page.evaluate("document.querySelectorAll('.CtxtMenu_Menu, .CtxtMenu_MenuFrame').length")
    assert menus == 0, "MathJax's (English) context menu opened"
