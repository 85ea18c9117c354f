"""Sphinx extension: the bibliography's list roles, fixed in the written page.

docutils writes the citation list as ``<div role="list">`` holding ``<div role="doc-biblioentry">``
entries: a list without list items for assistive technology (axe: aria-required-children,
critical), with a role that ARIA 1.3 deprecates (aria-deprecated-role) and does not allow on a
<div> (aria-allowed-role). Each entry becomes ``role="listitem"``. The other accessibility fixes
are a template (book/_templates/navbar-logo.html: the sidebar's book title inside a landmark)
and styles (book/_static_files/book.css: link contrast in exercise boxes).
tests/site/test_accessibility.py runs axe-core on every page in the light and the dark theme.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def _fix_roles(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object) -> None:
    body = context.get("body")
    if isinstance(body, str) and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", _fix_roles)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
