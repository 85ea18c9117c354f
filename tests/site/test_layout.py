"""The site as a Korean reader meets it, at 1280 px, 900 px and on a 390 x 844 phone.

- The visible sidebar toggles (the ☰ chapter list and the page-contents button) open and close
  their sidebar or drawer (book/_static_files/sidebar_toggles.js).
- Figures keep their natural aspect ratio on screen and in print (book/_static_files/book.css).
- No line breaks inside a Korean word (word-break: keep-all), and the summary table of chapter 12
  keeps readable columns or scrolls inside its box.
- No rendered line starts with a particle or with . , ) right after a formula
  (book/_ext/math_particles.py keeps a formula and what is attached to it on one line).

Each test collects every fault on every chapter at one width and reports them all at once.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from conftest import DESKTOP, PHONE, ROOT, SITE, TABLET, open_page, probe

CHAPTERS = sorted(str(p.relative_to(SITE)) for p in (SITE / "book").glob("*.html")) if SITE.is_dir() else []
WIDTHS = {"1280": DESKTOP, "900": TABLET, "phone": PHONE}
SUMMARY = "book/12_summary.html"


# A summary-table cell narrower than this is crushed (about six Korean syllables at 16 px; in print,
# at the smaller print size, about five).
MIN_CELL_WIDTH = 96
MIN_PRINT_CELL_WIDTH = 60
# The text width of the PDF edition's A4 page (tools/build_pdf.py: 210 mm less 2 x 16 mm margins).
A4 = {"width": 673, "height": 950}
A4_TEXT_HEIGHT = 986  # 297 mm less 2 x 18 mm, in CSS pixels


def _math_particles():
    spec = importlib.util.spec_from_file_location("math_particles", ROOT / "book" / "_ext" / "math_particles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The Korean particles that attach to the word before them: a line must not start with one of them
# right after a formula.
PARTICLES = set(_math_particles().PARTICLES)


# --- 1. Sidebar toggles ---------------------------------------------------------------------------

SIDEBARS = {"primary": "#pst-primary-sidebar", "secondary": "#pst-secondary-sidebar"}


def visible_links(page, kind: str):
    """The visible links of a sidebar, wherever the theme has put them (the sidebar or its drawer)."""
    sidebar = SIDEBARS[kind]
    return page.locator(f"{sidebar} a[href]:visible, {sidebar}-modal a[href]:visible")


def drawer_is_open(page, kind: str) -> bool:
    return page.evaluate(f"!!document.querySelector('{SIDEBARS[kind]}-modal')?.open")


def visible_toggles(page, kind: str):
    return page.locator(f".{kind}-toggle:visible")


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("kind", ["primary", "secondary"])
def test_sidebar_toggles_open_and_close(kind, width, browser, base_url):
    viewport = WIDTHS[width]
    # The summary chapter: both sidebars like every chapter, a sixth of a long chapter's elements.
    with open_page(browser, base_url, "book/12_summary.html", viewport) as page:
        toggles = visible_toggles(page, kind)
        if kind == "secondary" and toggles.count() == 0:
            # On a wide screen the page contents stand beside the text, with no button to hide them.
            assert visible_links(page, kind).count() > 0, f"{width}: no page contents and no button for them"
            return
        assert toggles.count() == 1, f"{width}: {toggles.count()} visible {kind} toggles"
        shown_at_start = visible_links(page, kind).count() > 0
        toggles.first.click()
        page.wait_for_timeout(400)
        if shown_at_start:
            # A wide screen: the chapter list stands beside the text; the button hides it, then shows it.
            assert visible_links(page, kind).count() == 0, f"{width}: the {kind} toggle did not hide the sidebar"
            toggles.first.click()
            page.wait_for_timeout(400)
            links = visible_links(page, kind)
            assert links.count() > 0, f"{width}: the {kind} toggle did not show the sidebar again"
            links.first.click(trial=True, timeout=3000)
        else:
            # A narrow screen: the button opens the sidebar as a drawer with working links.
            assert drawer_is_open(page, kind), f"{width}: the {kind} toggle did not open its drawer"
            links = visible_links(page, kind)
            assert links.count() > 0, f"{width}: the {kind} drawer shows no links"
            links.first.click(trial=True, timeout=3000)
            # Escape closes it ...
            page.keyboard.press("Escape")
            page.wait_for_timeout(300)
            assert not drawer_is_open(page, kind) and visible_links(page, kind).count() == 0, (
                f"{width}: Escape did not close the {kind} drawer"
            )
            # ... and so does a tap beside it, after the button has opened it a second time.
            toggles.first.click()
            page.wait_for_timeout(400)
            assert drawer_is_open(page, kind), f"{width}: the {kind} toggle did not open its drawer again"
            x = viewport["width"] - 5 if kind == "primary" else 5
            page.mouse.click(x, viewport["height"] // 2)
            page.wait_for_timeout(300)
            assert not drawer_is_open(page, kind), f"{width}: a tap beside the {kind} drawer did not close it"


# --- 2. Figures keep their shape -------------------------------------------------------------------

IMAGE_RATIOS = """
async () => {
  const images = Array.from(document.querySelectorAll('article.bd-article img'))
    .filter(i => i.src.includes('/_images/'));
  await Promise.all(images.map(i => i.decode().catch(() => null)));
  return images.map(i => { const r = i.getBoundingClientRect();
    return {src: i.src.split('/').pop().slice(0, 12), w: r.width, h: r.height,
            nw: i.naturalWidth, nh: i.naturalHeight}; });
}
"""


def off_ratio(images: list[dict], where: str) -> list[str]:
    faults = []
    for im in images:
        if im["nw"] and im["nh"] and im["w"] and im["h"]:
            ratio = (im["w"] / im["h"]) / (im["nw"] / im["nh"])
            if abs(ratio - 1) > 0.01:
                faults.append(f"{where}: {im['src']} drawn {im['w']:.0f}x{im['h']:.0f}, natural {im['nw']}x{im['nh']}")
    return faults


@pytest.mark.parametrize("media", ["screen", "print"])
@pytest.mark.parametrize("width", list(WIDTHS))
def test_figures_keep_their_aspect_ratio(width, media, measured):
    faults, seen = [], 0
    for chapter, found in measured(width).items():
        images = found["images" if media == "screen" else "print_images"]
        seen += len(images)
        faults += off_ratio(images, chapter)
    assert seen, "no figures found"
    assert not faults, f"{len(faults)} of {seen} figures off their aspect ratio ({width}, {media}):\n" + "\n".join(
        faults
    )


# --- 3. Korean line breaking -----------------------------------------------------------------------

# For every text node of the article's prose: the places where a line break falls between two
# letters or digits of one space-free word, one of them Hangul.
WORD_BREAKS = r"""
() => {
  const skip = 'pre, code, kbd, mjx-container, script, style, .math, .MathJax, button, .headerlink, figure.explorer';
  const letter = /[\p{L}\p{N}]/u, hangul = /[\uac00-\ud7a3]/;
  const root = document.querySelector('article.bd-article');
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const found = [];
  const range = document.createRange();
  const top = (node, i) => { range.setStart(node, i); range.setEnd(node, i + 1);
                             const r = range.getClientRects(); return r.length ? r[0] : null; };
  while (walker.nextNode()) {
    const node = walker.currentNode, text = node.textContent;
    if (!hangul.test(text) || node.parentElement.closest(skip)) continue;
    if (!node.parentElement.getClientRects().length) continue;
    let previous = null;
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (!letter.test(ch)) { previous = null; continue; }
      const rect = top(node, i);
      if (previous && rect && previous.rect && rect.top > previous.rect.top + previous.rect.height / 2
          && (hangul.test(ch) || hangul.test(previous.ch))) {
        found.push(text.slice(Math.max(0, i - 8), i) + '|' + text.slice(i, i + 8));
      }
      previous = {ch, rect};
    }
  }
  return found;
}
"""


@pytest.mark.parametrize("width", list(WIDTHS))
def test_no_line_break_inside_a_korean_word(width, measured):
    faults = []
    for chapter, found in measured(width).items():
        faults += [f"{chapter}: {b}" for b in found["breaks"]]
    assert not faults, f"{len(faults)} Korean words broken across lines ({width}):\n" + "\n".join(faults[:40])


def test_korean_fonts_come_first(browser, base_url):
    """The text asks for the reader's Korean system fonts before the theme's generic stack, and
    the installed one (NanumGothic here, fonts-nanum) is among them."""
    with open_page(browser, base_url, "book/02_sinusoidal.html", DESKTOP) as page:
        families = page.evaluate("getComputedStyle(document.querySelector('article.bd-article p')).fontFamily")
    names = [f.strip().strip('"').strip("'") for f in families.split(",")]
    assert "NanumGothic" in names, families
    generic = min(names.index(n) for n in ("system-ui", "sans-serif") if n in names)
    assert names.index("NanumGothic") < generic, families


@pytest.mark.parametrize("width", [*WIDTHS, "print"])
def test_summary_table_is_readable(width, browser, base_url):
    """Chapter 12's seven-column table: no crushed column; on screen, where it is wider than its box,
    it scrolls inside the box; in print (an A4 page's text width) it fits the page and no row takes
    more than half a page."""
    with open_page(browser, base_url, SUMMARY, WIDTHS.get(width, A4)) as page:
        if width == "print":
            page.emulate_media(media="print")
            page.wait_for_timeout(100)
        table = page.evaluate(
            """() => { const t = document.querySelector('article.bd-article table');
                 const cells = Array.from(t.querySelectorAll('th, td')).map(c => c.getBoundingClientRect().width);
                 let box = t.parentElement;
                 while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
                 const article = document.querySelector('article.bd-article').getBoundingClientRect();
                 const rows = Array.from(t.querySelectorAll('tr')).map(r => r.getBoundingClientRect().height);
                 return {narrowest: Math.min(...cells), tallest: Math.max(...rows),
                         width: t.getBoundingClientRect().width,
                         right: t.getBoundingClientRect().right, articleRight: article.right,
                         viewport: window.innerWidth,
                         pageOverflow: document.documentElement.scrollWidth - window.innerWidth,
                         scrolls: !!box && box !== document.documentElement && box !== document.body
                                  && box.scrollWidth > box.clientWidth + 1}; }"""
        )
    minimum = MIN_PRINT_CELL_WIDTH if width == "print" else MIN_CELL_WIDTH
    assert table["narrowest"] >= minimum, f"{width}: a column is {table['narrowest']:.0f}px wide"
    assert table["pageOverflow"] <= 1, f"{width}: the table widens the page by {table['pageOverflow']}px"
    if width == "print":
        assert table["tallest"] <= A4_TEXT_HEIGHT / 2, f"print: a row is {table['tallest']:.0f}px tall"
        assert table["right"] <= table["articleRight"] + 1, (
            f"print: the table runs {table['right'] - table['articleRight']:.0f}px past the text"
        )
    elif table["right"] > table["viewport"] + 1:
        assert table["scrolls"], f"{width}: the table runs off the screen without scrolling in its box"


# --- 4. A formula keeps its particle -------------------------------------------------------------

# For every inline formula of the article: the text that follows it, if that text begins on a
# new line (its first character sits below the formula's last line).
AFTER_MATH = r"""
() => {
  const found = [];
  const range = document.createRange();
  const maths = Array.from(document.querySelectorAll('article.bd-article span.math'))
    .filter(m => !m.closest('div.math') && m.getClientRects().length);
  for (const math of maths) {
    // The first text after the formula, however deep the next node is.
    let node = math, text = null;
    while (node && !text) {
      while (node && !node.nextSibling) node = node.parentNode;
      if (!node) break;
      node = node.nextSibling;
      if (node.nodeType === Node.TEXT_NODE) { if (node.textContent.trim()) text = node; }
      else if (node.nodeType === Node.ELEMENT_NODE) {
        if (node.matches('span.math, pre, div, p, li, figure, table')) break;
        const w = document.createTreeWalker(node, NodeFilter.SHOW_TEXT,
          {acceptNode: t => t.textContent.trim() ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_SKIP});
        text = w.nextNode();
        if (text && text.parentElement.closest('span.math')) { text = null; break; }
      }
    }
    if (!text) continue;
    const s = text.textContent, i = s.search(/\S/);
    range.setStart(text, i); range.setEnd(text, i + 1);
    const first = range.getClientRects()[0];
    const lines = math.getClientRects(), last = lines[lines.length - 1];
    if (first && last && first.top >= last.bottom - 2) {
      // A formula that with its particle is wider than the whole line cannot keep it.
      const line = math.closest('p, li, td, th, dd, dt, figcaption, div');
      const style = getComputedStyle(line);
      const room = line.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      const word = s.slice(i).split(/\s/)[0];
      range.setStart(text, i); range.setEnd(text, i + word.length);
      const pair = math.getBoundingClientRect().width + range.getBoundingClientRect().width;
      found.push({word: s.slice(i).split(/\s/)[0], tooWide: pair > room - 1,
                  context: (math.textContent.slice(-20) + ' ' + s.slice(0, 20))});
    }
  }
  return found;
}
"""


def attached(word: str) -> bool:
    """Whether a word that starts a line belongs to the formula before it (a particle, or . , ))."""
    if word[:1] in ".,)":
        return True
    core = re.sub(r"[.,)\]:;?!]+$", "", word)
    return core in PARTICLES


@pytest.mark.parametrize("width", ["1280", "phone"])
def test_no_line_starts_with_a_particle_after_a_formula(width, measured):
    faults = []
    for chapter, found in measured(width).items():
        for hit in found["after_math"]:
            if attached(hit["word"]) and not hit["tooWide"]:
                faults.append(f"{chapter}: {hit['context']!r}")
    assert not faults, f"{len(faults)} lines start with a particle after a formula ({width}):\n" + "\n".join(
        faults[:40]
    )


# --- One visit per chapter and width --------------------------------------------------------------


@probe(*WIDTHS)
def layout(page, page_path: str) -> dict:
    """What the tests above look at on a chapter, on screen and in print (then back to screen)."""
    found = {
        "images": page.evaluate(IMAGE_RATIOS),
        "breaks": page.evaluate(WORD_BREAKS),
        "after_math": page.evaluate(AFTER_MATH),
    }
    page.emulate_media(media="print")
    page.wait_for_timeout(100)
    found["print_images"] = page.evaluate(IMAGE_RATIOS)
    page.emulate_media(media="screen")
    page.wait_for_timeout(100)
    return found


@pytest.fixture(scope="session")
def measured(visit):
    """measured(width): {chapter: what layout() found on it at this width}, each chapter loaded once
    per width in the whole session (conftest.visit)."""
    return lambda width: visit.many(width, CHAPTERS, layout)
