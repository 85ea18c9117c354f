"""Sphinx extension: serve MathJax from the site itself, so formulas render offline.

Sphinx loads MathJax from a CDN by default. This extension points ``mathjax_path`` at a
copy inside the built site and copies MathJax 3's ``es5`` distribution there once the
HTML build has finished. The files come from the pinned PyPI package
``django-static-mathjax`` (installed by requirements.txt); nothing of MathJax is
committed to this repository.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError

STATIC_SUBDIR = "mathjax"
ENTRY_POINT = "tex-mml-chtml.js"


def mathjax_source() -> Path:
    """The installed MathJax 3 ``es5`` folder (from django-static-mathjax)."""
    try:
        import mathjax  # the import name of django-static-mathjax
    except ImportError as exc:
        raise ExtensionError("offline_mathjax needs the package django-static-mathjax (see requirements.txt)") from exc
    source = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (source / ENTRY_POINT).is_file():
        raise ExtensionError(f"offline_mathjax: {source / ENTRY_POINT} is missing; reinstall django-static-mathjax")
    return source


def _use_local_path(app: Sphinx, config: Config) -> None:
    # A relative mathjax_path resolves under _static/ in every page.
    config.mathjax_path = f"{STATIC_SUBDIR}/{ENTRY_POINT}"
    # MathJax's context menu speaks English only (no Korean translation exists), so it is off. It
    # also gave every formula a tab stop; book/_static_files/math_focus.js gives one back to the
    # display formulas, which scroll sideways when wider than the text.
    settings = dict(config.mathjax3_config or {})
    settings["options"] = {**settings.get("options", {}), "enableMenu": False}
    config.mathjax3_config = settings


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / STATIC_SUBDIR
    shutil.copytree(mathjax_source(), target, dirs_exist_ok=True)


def setup(app: Sphinx) -> dict[str, object]:
    mathjax_source()  # fail early, before a long build, if the package is missing
    app.connect("config-inited", _use_local_path)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
