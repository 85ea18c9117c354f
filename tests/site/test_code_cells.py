"""Code cells fit the page: on a desktop screen no code cell needs a horizontal scrollbar.

book/ruff.toml limits the notebooks' code lines to LINE_LENGTH characters, chosen from a
measurement of the rendered code cell at DESKTOP width (see the comment there). These tests
check both halves: that a line of LINE_LENGTH characters does fit (so a change of the theme, the
font or the CSS that breaks the measurement fails here), and that no code cell on any page
scrolls sideways (so a line that ruff cannot see, or that is allowed to be long, fails too).
"""

from __future__ import annotations

import re

import pytest

from conftest import ROOT, SITE, open_page, probe

# A 1280-px desktop window with a classic 15-px vertical scrollbar (headless Chromium draws
# overlay scrollbars, so its viewport has to be made narrower to match). Wider windows give
# code cells more room up to 1440 px; between 1200 and 1264 px the right-hand sidebar leaves less.
DESKTOP = {"width": 1265, "height": 900}
LINE_LENGTH = int(re.search(r"^line-length\s*=\s*(\d+)", (ROOT / "book" / "ruff.toml").read_text(), re.M).group(1))
CHAPTERS = sorted(str(p.relative_to(SITE)) for p in (SITE / "book").glob("*.html")) if SITE.is_dir() else []
SAMPLE_PAGE = "book/02_sinusoidal.html"
# The set-up cell's %pip line holds the repository URL, one unbreakable token; its text is fixed
# by tests/test_repository.py, so it is the one code cell allowed to scroll.
SET_UP_CELL = "# Set-up: use the installed posenc"

CODE_CELLS = "div.cell_input pre"
TAB_STOPS_SETTLE_MS = 500  # pydata-sphinx-theme recomputes tab stops 300 ms after the last resize


def test_a_line_of_the_notebook_line_length_fits_in_a_code_cell(browser, base_url, site):
    with open_page(browser, base_url, SAMPLE_PAGE, DESKTOP) as page:
        page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")  # hidden cells too
        fits = page.evaluate(
            """([selector, n]) => {
                 const pre = document.querySelector(selector);
                 if (!pre) return null;
                 const fits = k => { pre.textContent = 'x = "' + 'a'.repeat(k - 6) + '"';
                                     return pre.scrollWidth <= pre.clientWidth; };
                 let k = 10; while (k < 400 && fits(k + 1)) k++;
                 return [fits(n), k];
               }""",
            [CODE_CELLS, LINE_LENGTH],
        )
    assert fits is not None, f"{SAMPLE_PAGE} has no code cell"
    fits_limit, most = fits
    assert fits_limit, (
        f"a code cell at {DESKTOP['width']} px holds only {most} characters, but book/ruff.toml allows "
        f"{LINE_LENGTH}: measure again and lower line-length there"
    )


WIDE_CELLS = """([selector, setUp]) => Array.from(document.querySelectorAll(selector))
    .filter(pre => pre.scrollWidth > pre.clientWidth && !pre.textContent.startsWith(setUp))
    .map(pre => pre.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''))"""


@probe("1280")
def wide_code_cells(page, page_path: str) -> list[str]:
    """On the shared 1280-px visit, narrowed to DESKTOP's width (the window's scrollbar) with every
    folded cell opened: the longest line of each code cell that scrolls sideways. The page is left
    as it was found (folds, width and the theme's tab stops) for the next probe."""
    opened = page.evaluate(
        "Array.from(document.querySelectorAll('details')).map(d => { const was = d.open; d.open = true; return was; })"
    )
    width = page.viewport_size
    page.set_viewport_size(DESKTOP)
    try:
        return page.evaluate(WIDE_CELLS, [CODE_CELLS, SET_UP_CELL])
    finally:
        page.set_viewport_size(width)
        page.evaluate("(was) => document.querySelectorAll('details').forEach((d, i) => { d.open = was[i]; })", opened)
        # The theme gives scrollable boxes a tab stop again 300 ms after a resize (debounced): let it
        # run now, on the page as it was, not during a later probe (the layout probe's print media
        # would then take the tab stop from a code cell that scrolls on screen, and axe reports it).
        page.wait_for_timeout(TAB_STOPS_SETTLE_MS)


@pytest.mark.parametrize("page_path", CHAPTERS)
def test_no_code_cell_scrolls_sideways_on_a_desktop(page_path, visit):
    wide = visit("1280", page_path, wide_code_cells)
    assert not wide, (
        f"{page_path}: {len(wide)} code cells scroll sideways at {DESKTOP['width']} px; their longest lines:\n  "
        + "\n  ".join(f"({len(line)}) {line}" for line in wide)
    )
