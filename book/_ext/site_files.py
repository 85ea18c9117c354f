"""Sphinx extension: the last English strings of the interface, the site's entry page and its 404.

Three interface strings are not gettext messages, so book/_ext/korean_ui.py cannot translate
them; they are written in Korean into the built files when the build finishes:

* the copy button of code cells (sphinx-copybutton's messages have no Korean entry; the script
  picks its language from <html lang="ko">, so a Korean entry is added to its table);
* the aria-label of the solution dropdowns' button (sphinx-togglebutton writes it in its script);
* the label of the print-only contents of each page (sphinx-book-theme's layout.html).

Jupyter Book writes index.html as a bare redirect without a language, title or icon (a browser
then asks for /favicon.ico, which does not exist); it is written again as a small Korean page
with the book's title and icon (the html_favicon every other page links) that redirects to the
introduction. A 404.html in Korean (GitHub Pages serves it for any missing page, at any depth,
so its links are absolute paths under the site's root on Pages) links to the introduction and
the search page.

The download menu of each page offered ".pdf", which only printed the page (window.print()); it
now links the book's PDF edition (tools/build_pdf.py puts it at the site's root), the one a
reader looking for a PDF wants; a page can still be printed from the browser.

Each replacement is checked: if the upstream text has changed and neither it nor the Korean is
in the file, the build fails, so a theme upgrade that moves a string is noticed.
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import urlsplit

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

COPYBUTTON_KO = """  'ko': {
    'copy': '복사',
    'copy_to_clipboard': '클립보드에 복사',
    'copy_success': '복사했습니다',
    'copy_failure': '복사하지 못했습니다',
  },
"""
#: file under the output folder -> [(upstream text, Korean text)]
STATIC_PATCHES = {
    "_static/copybutton.js": [("const messages = {\n", "const messages = {\n" + COPYBUTTON_KO)],
    "_static/togglebutton.js": [('aria-label="Toggle hidden content"', 'aria-label="숨긴 내용 펼치기"')],
}
PAGE_PATCHES = [('<nav aria-label="Page">', '<nav aria-label="이 페이지의 목차">')]


def _patch(path: Path, patches: list[tuple[str, str]], required: bool) -> None:
    text = path.read_text(encoding="utf-8")
    for english, korean in patches:
        if korean in text:
            continue
        if english in text:
            text = text.replace(english, korean)
        elif required:
            raise ExtensionError(f"site_files: {english!r} is no longer in {path.name}: update book/_ext/site_files.py")
    path.write_text(text, encoding="utf-8")


def _entry_page(title: str, target: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="ko">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="icon" href="_static/favicon.svg" type="image/svg+xml">
<meta http-equiv="Refresh" content="0; url={target}">
</head>
<body>
<p><a href="{target}">{html.escape(title)}</a>의 첫 장으로 이동합니다.</p>
</body>
</html>
"""


NOT_FOUND = """<!DOCTYPE html>
<html lang="ko">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>페이지를 찾을 수 없습니다 · {title}</title>
<link rel="icon" href="{root}_static/favicon.svg" type="image/svg+xml">
<style>
  body {{ font-family: "Noto Sans KR", "NanumGothic", "Apple SD Gothic Neo", "Malgun Gothic", sans-serif;
         max-width: 36rem; margin: 4rem auto; padding: 0 1rem; line-height: 1.7; word-break: keep-all;
         color: #222; background: #fff; }}
  a {{ color: #0a58ca; }}
  @media (prefers-color-scheme: dark) {{ body {{ color: #ddd; background: #121212; }} a {{ color: #8ab4f8; }} }}
</style>
</head>
<body>
<main>
<h1>페이지를 찾을 수 없습니다</h1>
<p>주소가 바뀌었거나 잘못 입력되었을 수 있습니다. <a href="{root}book/intro.html">들어가며</a>에서
장 목록을 보거나, <a href="{root}search.html">검색</a>으로 찾아보세요.</p>
</main>
</body>
</html>
"""


def _finish(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for name, patches in STATIC_PATCHES.items():
        if (out / name).is_file():
            _patch(out / name, patches, required=True)
    for page in out.rglob("*.html"):
        if "_static" not in page.relative_to(out).parts:
            _patch(page, PAGE_PATCHES, required=False)
    if app.builder.name != "html":
        return
    title = app.config.html_title or app.config.project
    (out / "index.html").write_text(_entry_page(title, f"{app.config.root_doc}.html"), encoding="utf-8")
    (out / "404.html").write_text(NOT_FOUND.format(title=html.escape(title), root=pages_root(app)), encoding="utf-8")


def pages_root(app: Sphinx) -> str:
    """The site's root path on GitHub Pages: /<repository>/ for a project site (from the repository
    URL in _config.yml), or the path of html_baseurl when one is set."""
    if app.config.html_baseurl:
        return urlsplit(app.config.html_baseurl).path.rstrip("/") + "/"
    repository = app.config.html_theme_options.get("repository_url", "")
    name = urlsplit(repository).path.strip("/").split("/")[-1] if repository else ""
    return f"/{name}/" if name else "/"


def book_pdf_in_download_menu(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Replace the download menu's print-this-page entry by a link to the book's PDF edition, and
    on a page of the book add its own PDF.

    Runs after sphinx-book-theme has made its header buttons (priority 501)."""
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        for index, button in enumerate(group["buttons"]):
            if button.get("label") == "download-pdf-button":
                group["buttons"][index] = {
                    "type": "link",
                    "url": context["pathto"](app.config.book_pdf, 1),
                    "text": "책 전체 PDF",
                    "tooltip": "책 전체를 PDF로 내려받기",
                    "icon": "fas fa-file-pdf",
                    "label": "download-book-pdf-button",
                }
                if _in_book(app, pagename):  # the page's own PDF, cut from the book's (tools/build_pdf.py)
                    group["buttons"].insert(
                        index + 1,
                        {
                            "type": "link",
                            "url": context["pathto"](f"pdf/{pagename.split('/')[-1]}.pdf", 1),
                            "text": "이 장 PDF",
                            "tooltip": "이 장만 PDF로 내려받기",
                            "icon": "fas fa-file-pdf",
                            "label": "download-chapter-pdf-button",
                        },
                    )
                break


def _in_book(app: Sphinx, pagename: str) -> bool:
    """A page of the book's contents (a chapter, the introduction, the back matter), not the
    search or index page."""
    return pagename == app.config.root_doc or any(pagename in docs for docs in app.env.toctree_includes.values())


def setup(app: Sphinx) -> dict[str, object]:
    # the PDF edition's file name at the site's root (_config.yml sets it; tools/build_pdf.py writes it)
    app.add_config_value("book_pdf", "book.pdf", "html", types=[str])
    app.connect("html-page-context", book_pdf_in_download_menu, priority=502)
    app.connect("build-finished", _finish)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
