"""Every notebook chapter offers its notebook for download, as saved (with outputs).

The download menu's ``.ipynb`` entry must serve a valid notebook, byte for byte the one in the
repository, whose first code cell is the book's set-up cell (so that it runs anywhere); and the
page says in one line how to run it locally.
"""

from __future__ import annotations

import importlib.util
import json
from urllib.request import urlopen

import nbformat
import pytest

from conftest import ROOT, SITE, probe

NOTEBOOKS = sorted(p.relative_to(ROOT) for p in (ROOT / "book").glob("*.ipynb"))


def _setup_cell() -> str:
    spec = importlib.util.spec_from_file_location("test_repository", ROOT / "tests" / "test_repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SETUP_CELL.format(url=module.REPO_URL)


def test_every_notebook_is_a_chapter():
    assert NOTEBOOKS
    missing = [str(nb) for nb in NOTEBOOKS if not (SITE / nb.with_suffix(".html")).is_file()]
    assert not missing, f"notebooks without a page: {missing}"


@probe("1280")
def notebook_downloads(page, page_path: str) -> dict:
    links = page.evaluate(
        "Array.from(document.querySelectorAll('.dropdown-download-buttons a'))"
        ".filter(a => a.getAttribute('href').endsWith('.ipynb')).map(a => new URL(a.href).pathname)"
    )
    return {"links": links, "note": page.evaluate("document.querySelector('p.notebook-note')?.innerText ?? ''")}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_page_offers_the_saved_notebook(notebook, visit, base_url):
    # paths, not URLs: the visit may have been made by another worker, with its own server
    found = visit("1280", str(notebook.with_suffix(".html")), notebook_downloads)
    links, note = found["links"], found["note"]
    assert len(links) == 1, f"{notebook}: expected one .ipynb download link, found {links}"
    with urlopen(base_url + links[0].lstrip("/")) as response:  # the test server on 127.0.0.1
        served = response.read()
    assert served == (ROOT / notebook).read_bytes(), f"{notebook}: the download is not the saved notebook"
    nb = nbformat.reads(served.decode(), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and code[0].source == _setup_cell()
    assert any(c.get("outputs") for c in code), "the download has no outputs"
    assert ".ipynb" in note and "Jupyter" in note, f"{notebook}: no line on running the notebook locally"
    json.loads(served)  # plain JSON as well, for tools other than nbformat
