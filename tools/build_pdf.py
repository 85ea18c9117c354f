"""Build the book's PDF edition: the single-page HTML build, printed by headless Chromium.

Why this route: the site already depends on Chromium (the browser tests) and on MathJax, so
printing the single-page build gives the same formulas, figures, numbering (그림 2.1, eq. 4.5),
Korean fonts (fonts-nanum) and bibliography as the site, offline, with no TeX installation
(a XeLaTeX route would add about a gigabyte of TeX Live and a second rendering of every
formula). Chromium keeps in-document links (cross-references, citations, the contents) as PDF
links and writes a PDF outline from the headings.

Steps: `jupyter-book build . --builder singlehtml` (warning-free, like the site; into SINGLE) -> one HTML
file whose in-book links are made in-document (#anchor) -> served on 127.0.0.1 -> Chromium with
print media, after MathJax has typeset every formula -> _build/pdf/<book_pdf>, also copied
into the HTML site (_build/html/<book_pdf>) that the introduction links to; the file name is
_config.yml's sphinx.config.book_pdf. Afterwards, with pypdf: the contents page's page numbers, the
book's outline, the running header (each page of a chapter but its first carries the chapter's
title at the top) and one PDF per chapter (_build/pdf/chapters/<name>.pdf, copied to the site's
pdf/ folder).

Usage: python tools/build_pdf.py [--skip-build]
"""

from __future__ import annotations

import argparse
import html as html_lib
import io
import json
import logging
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# The single-page build has a build folder of its own (its own doctrees and executed notebooks), so
# that it can run beside the site's build (make book runs the two at once).
PRINT_BUILD = ROOT / "_build" / "print"
SINGLE = PRINT_BUILD / "_build" / "singlehtml"
# the file name is set once, in _config.yml (sphinx.config.book_pdf)
PDF_NAME = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["book_pdf"]
PDF = ROOT / "_build" / "pdf" / PDF_NAME
SITE_COPY = ROOT / "_build" / "html" / PDF_NAME
# One PDF per page of the book (chapter, introduction, back matter), cut from the book's PDF: the
# download menu of each page offers its own (book/_ext/site_files.py links pdf/<name>.pdf).
CHAPTERS = ROOT / "_build" / "pdf" / "chapters"
SITE_CHAPTERS = ROOT / "_build" / "html" / "pdf"
# What the printing measured of its own layout, for tests/pdf to check (print_pdf writes it).
PRINT_LAYOUT = ROOT / "_build" / "pdf" / "print-layout.json"
PRINT_PAGE = "print.html"
sys.path.insert(0, str(ROOT / "tests" / "site"))
from conftest import CHROMIUM_FLAGS, find_chromium, serve  # noqa: E402 - the browser tests' own settings


def build_single_html() -> None:
    cmd = [str(ROOT / ".venv" / "bin" / "jupyter-book"), "build", ".", "--builder", "singlehtml", "-W", "-n"]
    cmd += ["--keep-going", "--path-output", str(PRINT_BUILD)]
    subprocess.run(cmd, cwd=ROOT, check=True)


# Only for the PDF: a cover page, a contents page, a title page per part, every chapter (and
# back-matter page) on a new page; code small enough that a notebook line (73 characters, the
# notebooks' ruff limit) fits the A4 text width; a code box is not split so that only its frame
# is left at the foot of a page.
PRINT_STYLE = """<style>
@media print {
  section.pdf-cover { break-after: page; text-align: center; padding-top: 30vh; }
  section.pdf-cover p.pdf-title { font-size: 2.4em; font-weight: bold; margin-bottom: 1.5em; }
  #jb-print-docs-body { display: none !important; }
  .bd-main .bd-content .bd-article h1:first-of-type { display: block; }
  section.pdf-cover p { margin: 0.6em 0; }
  span[id^="document-"] + section { break-before: page; }
  nav.pdf-contents { break-after: page; }
  nav.pdf-contents p.pdf-contents-title { font-size: 1.8em; font-weight: bold; margin: 0 0 1em; }
  nav.pdf-contents ol { list-style: none; margin: 0; padding: 0; }
  nav.pdf-contents li { margin: 0; }
  nav.pdf-contents a { display: flex; gap: 0.5em; color: inherit; text-decoration: none; }
  nav.pdf-contents a .pdf-leader { flex: 1; border-bottom: 1px dotted #999; margin-bottom: 0.35em; }
  nav.pdf-contents a .pdf-page { min-width: 2.5em; text-align: right; font-variant-numeric: tabular-nums; }
  nav.pdf-contents .pdf-contents-part { font-weight: bold; margin-top: 0.8em; }
  nav.pdf-contents .pdf-contents-chapter { font-weight: bold; margin-top: 0.3em; }
  nav.pdf-contents .pdf-contents-section { padding-left: 1.5em; font-size: 0.92em; }
  section.pdf-part { break-before: page; text-align: center; padding-top: 35vh; }
  section.pdf-part p { margin: 0.4em 0; }
  section.pdf-part p.pdf-part-title { font-size: 2em; font-weight: bold; }
  div.highlight pre, div.cell_output pre { font-size: 0.74em; }
  div.cell_input, div.cell_output > div, div.highlight { break-inside: avoid; }
}
</style>"""

# The footer: page n of N, readable on paper.
FOOTER = (
    '<div style="font-size:10px; width:100%; text-align:center; color:#333;">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


# The running headers: one A4 page per chapter holding only its title, in the top margin (above the
# 18 mm of the text area), printed by Chromium (so the Korean text is set in the book's font and
# embedded) and laid over the chapter's pages by pypdf (Chromium's header template is the same on
# every page).
HEADER_PAGE = """<!DOCTYPE html><html lang="ko"><head><meta charset="utf-8"><style>
@page { size: A4; margin: 0; }
html, body { margin: 0; padding: 0; }
div.pdf-running-header { height: 296mm; box-sizing: border-box; padding: 8mm 16mm 0; break-after: page;
  font: 8.5pt "Noto Sans KR", "NanumGothic", "나눔고딕", sans-serif; color: #444; text-align: right; }
div.pdf-running-header:last-child { break-after: auto; }
div.pdf-running-header span { display: block; padding-bottom: 1.2mm; border-bottom: 0.4pt solid #999; }
</style></head><body>%s</body></html>"""


def header_pages(browser, titles: list[str]) -> bytes:
    """A PDF of len(titles) A4 pages, page i holding titles[i] as a running header."""
    page = browser.new_page()
    body = "".join(f'<div class="pdf-running-header"><span>{html_lib.escape(t)}</span></div>' for t in titles)
    page.set_content(HEADER_PAGE % body, wait_until="load")
    printed = page.pdf(format="A4", margin={"top": "0", "bottom": "0", "left": "0", "right": "0"})
    page.close()
    return printed


def cover() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%cs %h"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    edition = f"<p>{commit[0]} 판 (커밋 {commit[1]})</p>" if len(commit) == 2 else ""
    return (
        '<section class="pdf-cover">'
        f'<p class="pdf-title">{html_lib.escape(config["title"])}</p>'
        f"<p>{html_lib.escape(config['author'])}</p>{edition}"
        f"<p>{html_lib.escape(config['repository']['url'])}</p>"
        "</section>"
    )


def parts() -> list[dict]:
    """The parts of _toc.yml: caption, number (the numbered parts count 1, 2, ...; else None),
    name ("제1부 기초", or the caption alone), the files of their chapters."""
    found, count = [], 0
    for part in yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]:
        count += bool(part.get("numbered"))
        number = count if part.get("numbered") else None
        found.append(
            {
                "caption": part["caption"],
                "number": number,
                "name": f"제{number}부 {part['caption']}" if number else part["caption"],
                "chapters": [chapter["file"] for chapter in part["chapters"]],
            }
        )
    return found


def part_page(part: dict) -> str:
    label = f'<p class="pdf-part-number">제{part["number"]}부</p>' if part["number"] else ""
    return (
        f'<section class="pdf-part">{label}<p class="pdf-part-title">{html_lib.escape(part["caption"])}</p></section>'
    )


def print_page() -> Path:
    """The single-page build with its in-book links made in-document, at the build's root."""
    root_doc = SINGLE / "index.html"
    target = re.search(r'url=([^"]+)"', root_doc.read_text()).group(1)
    html = (SINGLE / target).read_text()
    html = html.replace(f'href="{target}#', 'href="#').replace(f'href="{target}"', 'href="#"')
    html = html.replace("</head>", PRINT_STYLE + "</head>", 1)
    html = html.replace('<article class="bd-article">', '<article class="bd-article">' + cover(), 1)
    for part in parts():
        first = f'<span id="document-{part["chapters"][0]}"></span>'
        if first not in html:
            raise SystemExit(f"error: the single-page build has no {first}")
        html = html.replace(first, part_page(part) + first, 1)
    out = SINGLE / PRINT_PAGE
    out.write_text(html)
    return out


# Every visible heading of the book in document order: level, text (a formula as its TeX source,
# made plain text by plain_title), anchor, and the document it belongs to (None: the root page).
HEADINGS = r"""
() => {
  const tex = new Map(MathJax.startup.document.getMathItemsWithin(document.body)
                        .map(item => [item.typesetRoot, item.math]));
  const text = node => {
    if (node.nodeType === Node.TEXT_NODE) return node.textContent;
    if (node.nodeType !== Node.ELEMENT_NODE || node.matches('a.headerlink')) return '';
    if (tex.has(node)) return '\\(' + tex.get(node) + '\\)';
    return Array.from(node.childNodes).map(text).join('');
  };
  let doc = null;
  const found = [];
  const selector = 'span[id^="document-"], article.bd-article :is(h1, h2, h3, h4, h5, h6)';
  for (const el of document.querySelectorAll(selector)) {
    if (el.tagName === 'SPAN') { doc = el.id.slice('document-'.length); continue; }
    if (!el.getClientRects().length) continue;
    const link = el.querySelector('a.headerlink');
    found.push({level: +el.tagName[1], text: text(el), doc,
                anchor: link ? decodeURIComponent(link.getAttribute('href').slice(1)) : ''});
  }
  return found;
}
"""

# Links that only make sense on the site: an image that links to its own file (it would point to
# the build-time server), and any other relative link, which goes to the public site instead.
SITE_LINKS = r"""
(site) => {
  document.querySelectorAll('a.image-reference').forEach(a => a.replaceWith(...a.childNodes));
  for (const a of document.querySelectorAll('a[href]')) {
    const href = a.getAttribute('href');
    if (href.startsWith('#') || /^[a-z][a-z0-9+.-]*:/i.test(href)) continue;
    a.setAttribute('href', new URL(href, site).href);
  }
}
"""

TEX_SYMBOLS = {
    "alpha": "\N{GREEK SMALL LETTER ALPHA}",
    "beta": "\N{GREEK SMALL LETTER BETA}",
    "gamma": "\N{GREEK SMALL LETTER GAMMA}",
    "delta": "\N{GREEK SMALL LETTER DELTA}",
    "theta": "\N{GREEK SMALL LETTER THETA}",
    "lambda": "\N{GREEK SMALL LETTER LAMDA}",
    "mu": "\N{GREEK SMALL LETTER MU}",
    "rho": "\N{GREEK SMALL LETTER RHO}",
    "sigma": "\N{GREEK SMALL LETTER SIGMA}",
    "tau": "\N{GREEK SMALL LETTER TAU}",
    "phi": "\N{GREEK SMALL LETTER PHI}",
    "omega": "\N{GREEK SMALL LETTER OMEGA}",
    "Phi": "\N{GREEK CAPITAL LETTER PHI}",
    "Delta": "\N{GREEK CAPITAL LETTER DELTA}",
    "times": "\N{MULTIPLICATION SIGN}",
    "cdot": "\N{MIDDLE DOT}",
    "le": "\N{LESS-THAN OR EQUAL TO}",
    "ge": "\N{GREATER-THAN OR EQUAL TO}",
    "infty": "\N{INFINITY}",
    "sqrt": "\N{SQUARE ROOT}",
    "to": "\N{RIGHTWARDS ARROW}",
}
SUBSCRIPT_DIGITS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def plain_title(text: str) -> str:
    """A heading as a bookmark title: formulas as plain text, whitespace as in the heading."""

    def plain(match: re.Match) -> str:
        tex = match.group(1)
        tex = re.sub(r"\\(?:text|mathrm|mathbf|operatorname)\{([^}]*)\}", r"\1", tex)
        tex = re.sub(r"\\([A-Za-z]+)", lambda m: TEX_SYMBOLS.get(m.group(1), m.group(1)), tex)
        tex = re.sub(r"_\{?(\d+)\}?", lambda m: m.group(1).translate(SUBSCRIPT_DIGITS), tex)
        return re.sub(r"[{}\\]", "", tex).replace("_", "")

    return re.sub(r"\s+", " ", re.sub(r"\\\((.*?)\\\)", plain, text)).strip()


def site_url() -> str:
    """The published site (GitHub Pages of the repository in _config.yml)."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    owner, name = url.removeprefix("https://github.com/").strip("/").split("/")[:2]
    return f"https://{owner}.github.io/{name}/"


def contents_entries(headings: list[dict]) -> list[dict]:
    """The contents page: the root page, then per part its name and each chapter with its
    sections (one level below the chapter's title), in the order of _toc.yml."""
    by_doc: dict[str | None, list[dict]] = {}
    for heading in headings:
        by_doc.setdefault(heading["doc"], []).append(heading)

    def document(doc: str | None) -> list[dict]:
        found = by_doc.get(doc)
        if not found:
            raise SystemExit(f"error: no heading of {doc or 'the root page'} in the single-page build")
        top = found[0]["level"]
        return [
            {"kind": "chapter" if h is found[0] else "section", "heading": h} for h in found if h["level"] <= top + 1
        ]

    entries = document(None)
    for part in parts():
        entries.append({"kind": "part", "title": part["name"]})
        for doc in part["chapters"]:
            entries += document(doc)
    return entries


def contents_html(entries: list[dict]) -> str:
    items = []
    for entry in entries:
        if entry["kind"] == "part":
            items.append(f'<li class="pdf-contents-part">{html_lib.escape(entry["title"])}</li>')
            continue
        heading = entry["heading"]
        anchor = html_lib.escape(heading["anchor"])
        items.append(
            f'<li class="pdf-contents-{entry["kind"]}"><a href="#{anchor}">'
            f"<span>{html_lib.escape(plain_title(heading['text']))}</span>"
            f'<span class="pdf-leader"></span><span class="pdf-page"></span></a></li>'
        )
    return f'<nav class="pdf-contents"><p class="pdf-contents-title">차례</p><ol>{"".join(items)}</ol></nav>'


def page_numbers(writer, numbers: list[int], first_page: int) -> None:
    """Write each contents line's page number at the right end of its line. The lines are the
    only links on the pages between the cover and the page of the first heading (index
    first_page), one link per line (wrapped over several rows), in order."""
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject

    font = DictionaryObject(  # Helvetica, one of the 14 fonts every PDF reader has: digits only
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    lines: list[tuple[int, tuple[float, float, float, float], str]] = []  # page, rectangle, target
    for index in range(1, first_page):
        page = writer.pages[index]
        links = [a.get_object() for a in page.get("/Annots") or [] if a.get_object().get("/Subtype") == "/Link"]
        for link in sorted(links, key=lambda a: -float(a["/Rect"][3])):
            x1, y1, x2, y2 = (float(v) for v in link["/Rect"])
            target = str(link.get("/Dest"))
            if lines and lines[-1][0] == index and lines[-1][2] == target:  # a line that wrapped
                _, (a1, b1, a2, b2), _ = lines.pop()
                x1, y1, x2, y2 = min(x1, a1), min(y1, b1), max(x2, a2), max(y2, b2)
            lines.append((index, (x1, y1, x2, y2), target))
    if len(lines) != len(numbers):
        raise SystemExit(f"error: the contents page has {len(lines)} linked lines for {len(numbers)} entries")
    size = 10.5
    for index in sorted({line[0] for line in lines}):
        text = []
        for (i, (_, y1, x2, _), _), number in zip(lines, numbers, strict=True):
            if i == index:
                width = len(str(number)) * 0.556 * size  # Helvetica's digits are 0.556 em wide
                baseline = y1 + 0.62 * size  # on the baseline of the line's last row of text
                text.append(f"BT /PdfPageNumber {size} Tf {x2 - width:.2f} {baseline:.2f} Td ({number}) Tj ET")
        page = writer.pages[index]
        resources = page["/Resources"].get_object()
        fonts = resources.setdefault(NameObject("/Font"), DictionaryObject()).get_object()
        fonts[NameObject("/PdfPageNumber")] = font
        before, after = DecodedStreamObject(), DecodedStreamObject()
        before.set_data(b"q\n")
        after.set_data(("\nQ\nq 0 g\n" + "\n".join(text) + "\nQ\n").encode())
        contents = page.raw_get("/Contents")  # the reference: a stream must stay an indirect object
        contents = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
        # (streams are indirect objects; pypdf has no public call to add one)
        page[NameObject("/Contents")] = ArrayObject([writer._add_object(before), *contents, writer._add_object(after)])


@dataclass
class Mark:
    """Where a heading landed in the printed PDF: page index and position (PDF units)."""

    page: int
    left: float
    top: float | None  # None: the top of the page


def outline_marks(reader) -> list[Mark]:
    """Chromium's outline (one entry per visible heading, in document order), flattened."""
    marks: list[Mark] = []

    def walk(items) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item)
            else:
                marks.append(
                    Mark(reader.get_destination_page_number(item), float(item.left or 0), float(item.top or 0))
                )

    walk(reader.outline)
    return marks


TEXT_AREA = {"width": round((210 - 2 * 16) / 25.4 * 96), "height": round((297 - 2 * 18) / 25.4 * 96)}  # CSS px
FOOT = 18 * 72 / 25.4  # the bottom margin in PDF points (options["margin"]["bottom"])


def settled(marks: list[Mark]) -> list[Mark]:
    """Chromium points a heading that starts a page now at that page, now at the foot of the one
    before, below its text (from one printing of the same layout to the next). Such a mark is
    moved to the top of the next page, where the heading is."""
    return [Mark(m.page + 1, m.left, None) if m.top is not None and m.top < FOOT + 6 else m for m in marks]


# Every numbered display equation as printed: is its number to the right of its typeset formula, on
# the same line? (On a narrow screen book.css moves the number above the formula; that rule once
# applied on paper too, since the A4 text width, 673 px, is under its 48em.) Measured here, on the
# page being printed, rather than by loading every chapter again at that width in the browser tests.
EQUATION_NUMBERS = """
() => Array.from(document.querySelectorAll('article.bd-article div.math')).flatMap(div => {
  const number = div.querySelector('span.eqno'), formula = div.querySelector('mjx-container');
  if (!number || !formula) return [];
  const n = number.getBoundingClientRect(), f = formula.getBoundingClientRect();
  return [{label: number.innerText.trim(), besideFormula: n.left >= f.left + 0.5 * f.width
                                                       && n.top < f.bottom && n.bottom > f.top}];
})
"""


def print_pdf(page_file: Path) -> None:
    from playwright.sync_api import sync_playwright
    from pypdf import PdfReader

    with serve(SINGLE) as base_url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_FLAGS, headless=True)
        # The window as wide as the printed text (A4 less the side margins): printing then
        # resizes nothing, so scripts that redraw on a resize (the explorers) do not move the page
        # breaks from one printing to the next.
        page = browser.new_page(viewport=TEXT_AREA)
        page.goto(base_url + page_file.name, timeout=120_000)
        page.wait_for_load_state("networkidle")
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60_000)
        page.evaluate("MathJax.startup.promise")
        # The explorers draw their default setting once their data has arrived.
        page.wait_for_function(
            "Array.from(document.querySelectorAll('figure.posenc-explorer')).every(f => f.dataset.ready)",
            timeout=60_000,
        )
        if page.evaluate("document.querySelectorAll('figure.posenc-explorer[data-ready=error]').length"):
            raise SystemExit("error: an explorer could not load its data in the PDF edition")
        if page.evaluate("document.querySelectorAll('mjx-merror').length"):
            raise SystemExit("error: MathJax could not typeset a formula in the PDF edition")
        page.emulate_media(media="print")
        # Lazy images would load while the first printing lays the pages out.
        page.evaluate(
            """() => Promise.all(Array.from(document.images).map(img => {
                   img.loading = 'eager'; return img.decode().catch(() => null); }))"""
        )
        # Solutions and other folded blocks are printed open. sphinx-togglebutton opens them on
        # "beforeprint" by clicking their buttons and clicks again on "afterprint"; in headless
        # printing those events do not pair up, so the blocks were open in one printing and
        # closed in the next, moving the page breaks. Opened here, they give its handlers nothing
        # to do.
        page.evaluate(
            """() => {
                 document.querySelectorAll('.admonition.toggle.toggle-hidden button.toggle-button')
                   .forEach(b => b.click());
                 document.querySelectorAll('details.toggle-details').forEach(d => { d.open = true; });
               }"""
        )
        page.wait_for_timeout(500)
        if page.evaluate("document.querySelectorAll('.admonition.toggle.toggle-hidden').length"):
            raise SystemExit("error: a folded block stayed closed in the PDF edition")
        # An explorer redraws its canvas, at a height that follows its width, whenever its width
        # changes; printing changes it (and changes it back afterwards), so every other printing
        # had other canvas heights. Each canvas is printed as a still image of its drawing instead.
        page.evaluate(
            """() => Promise.all(Array.from(document.querySelectorAll('figure.posenc-explorer canvas')).map(c => {
                 const still = document.createElement('img');
                 still.src = c.toDataURL('image/png');
                 still.alt = c.getAttribute('aria-label') || '';
                 still.className = 'pdf-explorer-still';
                 still.style.cssText = 'display: block; width: 100%; height: auto;';
                 c.after(still);
                 c.style.display = 'none';
                 return still.decode();
               }))"""
        )
        layout = {
            "width": page.evaluate("window.innerWidth"),
            "media_print": page.evaluate("matchMedia('print').matches"),
            "numbered_in_html": page.evaluate("document.querySelectorAll('span.eqno').length"),
            "equation_numbers": page.evaluate(EQUATION_NUMBERS),
        }
        page.evaluate(SITE_LINKS, site_url())
        headings = page.evaluate(HEADINGS)
        entries = contents_entries(headings)
        page.evaluate(
            "html => document.querySelector('section.pdf-cover').insertAdjacentHTML('afterend', html)",
            contents_html(entries),
        )
        options = {
            "format": "A4",
            "margin": {"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
            "print_background": True,
            "display_header_footer": True,
            "header_template": "<span></span>",
            "footer_template": FOOTER,
            "outline": True,
            "tagged": True,
        }
        # One printing. The contents page has an empty box of fixed width at the end of each
        # line; the page numbers are written into those boxes afterwards (write_edition), from
        # where this printing put each heading. (Printing twice to fill them in does not work:
        # Chromium breaks the pages of one layout a little differently from one printing to the
        # next, so a heading at the foot of a page may move to the next page.)
        printed = page.pdf(**options)
        titles = [plain_title(h["text"]) for h in chapter_headings(headings)]
        headers = PdfReader(io.BytesIO(header_pages(browser, titles)))
        browser.close()
    if len(headers.pages) != len(titles):
        raise SystemExit(f"error: {len(headers.pages)} running-header pages for {len(titles)} chapters")
    reader = PdfReader(io.BytesIO(printed))
    marks = outline_marks(reader)
    if len(marks) != len(headings):
        raise SystemExit(f"error: the PDF outline has {len(marks)} entries for {len(headings)} headings")
    write_edition(reader, headings, settled(marks), entries, headers)
    # written after the PDF, so that a layout file older than the PDF is one from an earlier printing
    PRINT_LAYOUT.write_text(json.dumps(layout, ensure_ascii=False, indent=1) + "\n")


def chapter_docs() -> list[str | None]:
    """The book's pages in order: the root page (None), then each part's chapters."""
    return [None] + [doc for part in parts() for doc in part["chapters"]]


def chapter_headings(headings: list[dict]) -> list[dict]:
    """The title heading (the first) of each page of chapter_docs(), in that order."""
    found = []
    for doc in chapter_docs():
        first = next((h for h in headings if h["doc"] == doc), None)
        if first is None:
            raise SystemExit(f"error: no heading of {doc or 'the root page'} in the single-page build")
        found.append(first)
    return found


def chapter_ranges(headings: list[dict], marks: list[Mark], pages: int) -> list[tuple[int, int]]:
    """The pages [first, end) of each page of chapter_docs(): from the page of its title to the
    next chapter's first page, less the part page that opens the next part."""
    position = {id(h): i for i, h in enumerate(headings)}
    starts = [marks[position[id(h)]].page for h in chapter_headings(headings)]
    part_pages = {starts[chapter_docs().index(part["chapters"][0])] - 1 for part in parts()}
    ranges = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else pages
        while end - 1 in part_pages and end - 1 > start:
            end -= 1
        ranges.append((start, end))
    return ranges


def running_headers(writer, ranges: list[tuple[int, int]], headers) -> None:
    """Lay header page i over every page of chapter i but its first (which opens with the title).

    Each header page becomes one form XObject, drawn by a short content stream on each of its
    pages (merging the page itself would copy its font into every page: twice the file)."""
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject

    for number, ((start, end), header) in enumerate(zip(ranges, headers.pages, strict=True)):
        form = DecodedStreamObject()
        form.set_data(header.get_contents().get_data())
        form.update(
            {
                NameObject("/Type"): NameObject("/XObject"),
                NameObject("/Subtype"): NameObject("/Form"),
                NameObject("/BBox"): ArrayObject(header.mediabox),
                NameObject("/Resources"): header["/Resources"].get_object().clone(writer),
            }
        )
        form_ref = writer._add_object(form)  # (pypdf has no public call to add a stream)
        name = NameObject(f"/PdfRunningHeader{number}")
        for index in range(start + 1, end):
            page = writer.pages[index]
            resources = page["/Resources"].get_object()
            xobjects = resources.setdefault(NameObject("/XObject"), DictionaryObject()).get_object()
            xobjects[name] = form_ref
            before, after = DecodedStreamObject(), DecodedStreamObject()
            before.set_data(b"q\n")
            after.set_data(f"\nQ\nq {name} Do Q\n".encode())
            contents = page.raw_get("/Contents")
            contents = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
            page[NameObject("/Contents")] = ArrayObject(
                [writer._add_object(before), *contents, writer._add_object(after)]
            )


def write_chapters(ranges: list[tuple[int, int]], headings: list[dict], marks: list[Mark]) -> None:
    """Cut the written book into one PDF per chapter, each with its own outline (its headings).
    A link to a page outside the chapter is dropped (it would lead nowhere)."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit

    if CHAPTERS.exists():
        shutil.rmtree(CHAPTERS)
    CHAPTERS.mkdir(parents=True)
    book = PdfReader(PDF)
    for doc, (start, end) in zip(chapter_docs(), ranges, strict=True):
        writer = PdfWriter()
        writer.append(book, pages=(start, end), import_outline=False)
        stack: list[tuple[int, object]] = [(0, None)]
        for heading, mark in zip(headings, marks, strict=True):
            if heading["doc"] != doc or not start <= mark.page < end:
                continue
            while len(stack) > 1 and stack[-1][0] >= heading["level"]:
                stack.pop()
            item = writer.add_outline_item(
                title=plain_title(heading["text"]),
                page_number=mark.page - start,
                parent=stack[-1][1],
                fit=Fit.xyz(mark.left, mark.top) if mark.top is not None else Fit.fit(),
            )
            stack.append((heading["level"], item))
        writer.page_mode = "/UseOutlines"
        with open(CHAPTERS / f"{chapter_name(doc)}.pdf", "wb") as out:
            writer.write(out)


def chapter_name(doc: str | None) -> str:
    """The file name (no suffix) of a page's own PDF: its source's name (02_sinusoidal, intro)."""
    root = yaml.safe_load((ROOT / "_toc.yml").read_text())["root"]
    return Path(doc or root).name


def write_edition(reader, headings: list[dict], marks: list[Mark], entries: list[dict], headers) -> None:
    """Write the PDF: the contents page's page numbers filled in, and Chromium's outline (every
    chapter under the root page, titles with lost spaces and doubled numbers) replaced by the
    book's: 차례, the root page, then each part with its chapters, their sections and
    subsections, titled as the headings read; each chapter's running header; then the chapters'
    own PDFs."""
    from pypdf import PdfWriter
    from pypdf.generic import Fit, NameObject

    writer = PdfWriter(clone_from=reader)
    position = {id(h): i for i, h in enumerate(headings)}
    page_numbers(
        writer, [marks[position[id(e["heading"])]].page + 1 for e in entries if e["kind"] != "part"], marks[0].page
    )
    writer.root_object.pop(NameObject("/Outlines"), None)
    writer.add_outline_item(title="차례", page_number=1, fit=Fit.fit())
    placed = list(zip(headings, marks, strict=True))

    def add_document(doc: str | None, parent) -> None:
        mine = [(h, m) for h, m in placed if h["doc"] == doc]
        stack: list[tuple[int, object]] = [(0, parent)]
        for heading, mark in mine:
            while len(stack) > 1 and stack[-1][0] >= heading["level"]:
                stack.pop()
            item = writer.add_outline_item(
                title=plain_title(heading["text"]),
                page_number=mark.page,
                parent=stack[-1][1],
                fit=Fit.xyz(mark.left, mark.top) if mark.top is not None else Fit.fit(),
            )
            stack.append((heading["level"], item))

    add_document(None, None)
    for part in parts():
        first = next(m for h, m in placed if h["doc"] == part["chapters"][0])
        item = writer.add_outline_item(
            title=part["name"],
            page_number=max(first.page - 1, 0),
            fit=Fit.fit(),
        )
        for doc in part["chapters"]:
            add_document(doc, item)
    ranges = chapter_ranges(headings, marks, len(writer.pages))
    running_headers(writer, ranges, headers)
    writer.page_mode = "/UseOutlines"
    PDF.parent.mkdir(parents=True, exist_ok=True)
    with open(PDF, "wb") as out:
        writer.write(out)
    write_chapters(ranges, headings, marks)


def main() -> None:
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # Chromium's trailer size is one of its warnings
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-build", action="store_true", help="reuse the single-page build (SINGLE)")
    args = parser.parse_args()
    if not args.skip_build:
        build_single_html()
    print_pdf(print_page())
    if SITE_COPY.parent.is_dir():
        shutil.copyfile(PDF, SITE_COPY)
        shutil.copytree(CHAPTERS, SITE_CHAPTERS, dirs_exist_ok=True)
    print(f"The PDF edition: {PDF} ({PDF.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
