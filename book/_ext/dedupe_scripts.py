"""Sphinx extension: drop duplicate <script> entries from each page.

With Sphinx 7.4 and Jupyter Book 1, the inline script of sphinx-thebe
(``const THEBE_JS_URL = ...``) reaches each page twice, once registered with the file name
``None`` and once with ``""``, so Sphinx's own duplicate check misses it and the browser
reports ``Identifier 'THEBE_JS_URL' has already been declared``. Treating both spellings of
"no file" as one and keeping the first of identical entries removes the error at its cause.
"""

from __future__ import annotations

from sphinx.application import Sphinx


def _script_key(script: object) -> tuple[str, tuple[tuple[str, str], ...]]:
    # Inline scripts are registered with filename None by some extensions and "" by others:
    # both mean "no file", so they must compare equal.
    filename = str(getattr(script, "filename", script) or "")
    attributes = getattr(script, "attributes", {}) or {}
    return filename, tuple(sorted((str(k), str(v)) for k, v in attributes.items()))


def _drop_duplicate_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict[str, object]:
    # Late priority: run after the extensions that add scripts during html-page-context.
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
