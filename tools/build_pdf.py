"""Build the book's PDF edition: the single-page HTML build, printed by headless Chromium.

Why this route: the site already depends on Chromium (the browser tests) and on MathJax, so
printing the single-page build gives the same formulas, figures, numbering (그림 2.1, eq. 4.5),
Korean fonts (fonts-nanum) and bibliography as the site, offline, with no TeX installation
(a XeLaTeX route would add about a gigabyte of TeX Live and a second rendering of every
formula). Chromium keeps in-document links (cross-references, citations, the contents) as PDF
links and writes a PDF outline from the headings.

Steps: `jupyter-book build . --builder singlehtml` (warning-free, like the site) -> one HTML
file whose in-book links are made in-document (#anchor) -> served on 127.0.0.1 -> Chromium with
print media, after MathJax has typeset every formula -> _build/pdf/<book_pdf>, also copied
into the HTML site (_build/html/<book_pdf>) that the introduction links to; the file name is
_config.yml's sphinx.config.book_pdf.

Usage: python tools/build_pdf.py [--skip-build]
"""

from __future__ import annotations

import argparse
import html as html_lib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SINGLE = ROOT / "_build" / "singlehtml"
# the file name is set once, in _config.yml (sphinx.config.book_pdf)
PDF_NAME = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["book_pdf"]
PDF = ROOT / "_build" / "pdf" / PDF_NAME
SITE_COPY = ROOT / "_build" / "html" / PDF_NAME
PRINT_PAGE = "print.html"
sys.path.insert(0, str(ROOT / "tests" / "site"))
from conftest import CHROMIUM_FLAGS, find_chromium, serve  # noqa: E402 - the browser tests' own settings

FOOTER = (
    '<div style="font-size:8px; width:100%; text-align:center; color:#555;">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


def build_single_html() -> None:
    cmd = [str(ROOT / ".venv" / "bin" / "jupyter-book"), "build", ".", "--builder", "singlehtml", "-W", "-n"]
    cmd.append("--keep-going")
    subprocess.run(cmd, cwd=ROOT, check=True)


# Only for the PDF: a cover page, and every chapter (and back-matter page) on a new page.
PRINT_STYLE = """<style>
@media print {
  section.pdf-cover { break-after: page; text-align: center; padding-top: 30vh; }
  section.pdf-cover p.pdf-title { font-size: 2.4em; font-weight: bold; margin-bottom: 1.5em; }
  #jb-print-docs-body { display: none !important; }
  .bd-main .bd-content .bd-article h1:first-of-type { display: block; }
  section.pdf-cover p { margin: 0.6em 0; }
  span[id^="document-"] + section { break-before: page; }
}
</style>"""


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


def print_page() -> Path:
    """The single-page build with its in-book links made in-document, at the build's root."""
    root_doc = SINGLE / "index.html"
    target = re.search(r'url=([^"]+)"', root_doc.read_text()).group(1)
    html = (SINGLE / target).read_text()
    html = html.replace(f'href="{target}#', 'href="#').replace(f'href="{target}"', 'href="#"')
    html = html.replace("</head>", PRINT_STYLE + "</head>", 1)
    html = html.replace('<article class="bd-article">', '<article class="bd-article">' + cover(), 1)
    out = SINGLE / PRINT_PAGE
    out.write_text(html)
    return out


def print_pdf(page_file: Path) -> None:
    from playwright.sync_api import sync_playwright

    with serve(SINGLE) as base_url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_FLAGS, headless=True)
        page = browser.new_page()
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
        PDF.parent.mkdir(parents=True, exist_ok=True)
        page.pdf(
            path=str(PDF),
            format="A4",
            margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
            print_background=True,
            display_header_footer=True,
            header_template="<span></span>",
            footer_template=FOOTER,
            outline=True,
            tagged=True,
        )
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-build", action="store_true", help="reuse _build/singlehtml")
    args = parser.parse_args()
    if not args.skip_build:
        build_single_html()
    print_pdf(print_page())
    if SITE_COPY.parent.is_dir():
        shutil.copyfile(PDF, SITE_COPY)
    print(f"The PDF edition: {PDF} ({PDF.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
