"""Sphinx extension: on the site and in the PDF, each chapter's set-up cell is folded away.

Every notebook starts with the same set-up cell (install posenc with pip when it is missing, as
in Colab). Readers of the site do not run it, and its long pip line used to be the first thing of
every chapter. The notebook keeps it whole (Colab needs it); the built page folds its code into a
<details> element with a one-line Korean summary, closed by default, so the code is one click
away and the PDF prints the summary line only.

myst-nb's own `hide-input` tag would do the same on the site, but its node has no writer in the
single-page build the PDF is printed from ("unknown node type"); a <details> written as raw HTML
around the cell's input works in every HTML builder.

The set-up cell is found by its first line (`# Set-up:`), which tests/test_repository.py keeps
the same in every notebook.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

FIRST_LINE = "# Set-up:"
SUMMARY = "설정 셀: posenc가 없으면 pip으로 설치한다(Colab용). 눌러서 코드 보기"


def _is_setup_input(node: nodes.Node) -> bool:
    if not (isinstance(node, nodes.container) and node.get("nb_element") == "cell_code_source"):
        return False
    code = next(iter(node.findall(nodes.literal_block)), None)
    return code is not None and code.astext().lstrip().startswith(FIRST_LINE)


def fold_setup_cells(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder.format != "html":
        return
    for source in list(doctree.findall(_is_setup_input)):
        parent = source.parent
        index = parent.index(source)
        opening = nodes.raw("", f'<details class="setup-cell"><summary>{SUMMARY}</summary>', format="html")
        parent.insert(index, opening)
        parent.insert(index + 2, nodes.raw("", "</details>", format="html"))
        parent["classes"].append("setup-cell-container")


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("doctree-resolved", fold_setup_cells)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
