"""Sphinx extension: the site's interface in Korean, fixed at the message catalogs.

sphinx-book-theme's Korean catalog translates the footer's "By" as the lone particle "으로"
(rendering "으로 posenc 집필진") and the Fullscreen tooltip as "전체 화면으로보기"; the PyData
theme ships no Korean catalog at all, and Sphinx's own leaves the permalink titles ("Link to
this heading") in English. This extension puts the book's own translations in front of those
catalogs when the build starts: every string the templates and the themes' Python code pass
through gettext (``_()`` in the templates, ``translate()`` in sphinx-book-theme) then comes out
in Korean. Three strings that the themes never pass through gettext are handled where they are
written: the two sidebar-toggle buttons, the sidebar's navigation label and the author line are
templates in book/_templates, and the search box's placeholder is a theme option set here.
Search result snippets show formulas as readable text (book/_static_files/search_math.js).
Notebook chapters end with a line on downloading and running them (book/_templates).

The browser test (tests/site/test_reading.py) fails on any English interface string it knows
and on the broken author line, so a theme upgrade that adds new strings is noticed.
"""

from __future__ import annotations

import gettext

from sphinx import locale
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

#: msgid -> Korean, for the catalogs "sphinx" (Sphinx and the PyData theme) and "booktheme".
TRANSLATIONS: dict[str, str] = {
    # sphinx-book-theme (catalog "booktheme")
    "By": "지은이",
    "Fullscreen mode": "전체 화면으로 보기",
    "Launch interactive content": "대화형으로 실행하기",
    "Launch on": "실행:",
    "Download this page": "이 페이지 내려받기",
    "Download source file": "원본 파일 내려받기",
    "Download notebook file": "노트북 파일 내려받기",
    "Print to PDF": "PDF로 인쇄",
    "Repository": "저장소",
    "Source repository": "소스 저장소",
    "Source repositories": "소스 저장소",
    "Open an issue": "이슈 열기",
    "Open issue": "이슈 열기",
    "Suggest edit": "수정 제안",
    "Show source": "소스 보기",
    "Search": "검색",
    "Contents": "목차",
    # PyData theme (catalog "sphinx"; the theme has no Korean catalog)
    "previous page": "이전 페이지",
    "next page": "다음 페이지",
    "previous": "이전",
    "next": "다음",
    "Color mode": "색상 모드",
    "Light": "밝게",
    "Dark": "어둡게",
    "System Settings": "시스템 설정 따르기",
    "Version warning": "버전 경고",
    "Back to top": "맨 위로",
    "Skip to main content": "본문으로 건너뛰기",
    "Site navigation": "사이트 탐색",
    "Section Navigation": "이 부분의 탐색",
    "On this page": "이 페이지의 내용",
    "Breadcrumb": "현재 위치",
    "Home": "처음으로",
    "Announcement": "알림",
    "Collapse Sidebar": "사이드바 접기",
    "Expand Sidebar": "사이드바 펼치기",
    "Show Source": "소스 보기",
    "Indices": "색인",
    "General Index": "전체 색인",
    # book/_templates (the theme writes these in English without gettext)
    "Toggle primary sidebar": "목차 사이드바 열고 닫기",
    "Toggle secondary sidebar": "이 페이지 목차 열고 닫기",
    # Sphinx's own Korean catalog leaves these in English
    "Link to this heading": "이 제목으로 가는 링크",
    "Link to this equation": "이 식으로 가는 링크",
    "Link to this image": "이 그림으로 가는 링크",
    "Link to this table": "이 표로 가는 링크",
    "Link to this code": "이 코드로 가는 링크",
    "Link to this definition": "이 정의로 가는 링크",
    "Please activate JavaScript to enable the search functionality.": "검색 기능을 쓰려면 JavaScript를 켜 주세요.",
    "© Copyright %(copyright)s.": "© %(copyright)s",
    "Copyright %(copyright)s": "%(copyright)s",
    "logo": "로고",
    "Main": "책 목차",
}

#: The search box's placeholder and aria-label (a theme option, not a gettext string).
SEARCH_BAR_TEXT = "이 책에서 검색..."

CATALOGS = ("sphinx", "booktheme")


class _BookTranslations(gettext.NullTranslations):
    """The book's strings first; everything else from the catalog it is put in front of."""

    def gettext(self, message: str) -> str:
        if message in TRANSLATIONS:
            return TRANSLATIONS[message]
        return super().gettext(message)


def _install(app: Sphinx) -> None:
    if app.config.language != "ko":
        return
    for catalog in CATALOGS:
        key = ("general", catalog)
        existing = locale.translators.get(key)
        if existing is None:
            raise ExtensionError(f"korean_ui: no translator registered for the {catalog!r} catalog")
        if isinstance(existing, gettext.GNUTranslations):
            # The object itself is shared (Jinja holds Sphinx's translator): update it in place.
            existing._catalog.update(TRANSLATIONS)
        else:
            ours = _BookTranslations()
            ours.add_fallback(existing)
            locale.translators[key] = ours


def _set_theme_options(app: Sphinx, config) -> None:
    options = dict(config.html_theme_options)
    if config.language == "ko":
        options["search_bar_text"] = SEARCH_BAR_TEXT
    # Under every notebook chapter, one line on downloading it and running it locally.
    options["article_footer_items"] = ["notebook-note.html"]
    config.html_theme_options = options


def setup(app: Sphinx) -> dict[str, object]:
    # Search snippets show formulas as readable text, not TeX source (book/_static_files).
    app.add_js_file("search_math.js")
    app.connect("config-inited", _set_theme_options)
    app.connect("builder-inited", _install)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
