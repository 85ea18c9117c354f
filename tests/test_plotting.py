"""Tests of posenc.plotting: the shared style is opaque, and the heatmap helper validates; the
book's figures have panels wide enough to read on a phone."""

import ast
import json
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from test_numbers import CHAPTERS  # the chapter notebooks, one list for the tests that read them

import posenc
from posenc.plotting import BOOK_STYLE, plot_matrix, use_book_style


def test_import_posenc_does_not_import_matplotlib_and_plotting_loads_on_use():
    script = (
        "import sys, posenc\n"
        "assert 'matplotlib' not in sys.modules, 'import posenc imported matplotlib'\n"
        "style = posenc.use_book_style\n"
        "assert 'matplotlib' in sys.modules and style is sys.modules['posenc.plotting'].use_book_style\n"
        "from posenc import use_book_style\n"
        "assert use_book_style is style and posenc.plotting.plot_matrix\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert posenc.use_book_style is use_book_style and "use_book_style" in dir(posenc)
    with pytest.raises(AttributeError, match="module 'posenc' has no attribute 'use_book_styles'"):
        posenc.use_book_styles  # noqa: B018


def test_book_style_draws_on_an_opaque_background():
    use_book_style()
    fig, ax = plt.subplots()
    try:
        assert matplotlib.colors.to_rgba(fig.get_facecolor())[3] == 1.0
        assert matplotlib.colors.to_rgba(ax.get_facecolor())[3] == 1.0
        assert matplotlib.rcParams["savefig.transparent"] is False
        for key, value in BOOK_STYLE.items():
            assert matplotlib.rcParams[key] == (list(value) if isinstance(value, tuple) else value), key
    finally:
        plt.close(fig)


@pytest.mark.parametrize("matrix", [torch.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3)])
def test_plot_matrix_draws_the_values(matrix):
    fig, ax = plt.subplots()
    try:
        image = plot_matrix(ax, matrix, row_labels=["a", "b"], col_labels=["x", "y", "z"], annotate=True, title="t")
        np.testing.assert_array_equal(image.get_array(), np.arange(6.0).reshape(2, 3))
        assert [t.get_text() for t in ax.texts] == ["0.00", "1.00", "2.00", "3.00", "4.00", "5.00"]
        assert ax.get_title() == "t"
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("matrix", "kwargs", "error", "pattern"),
    [
        (torch.zeros(3), {}, ValueError, "matrix must have 2 dimensions"),
        (np.zeros((2, 2, 2)), {}, ValueError, "matrix must have 2 dimensions"),
        ([[0.0]], {}, TypeError, "matrix must be a torch.Tensor or numpy.ndarray"),
        (torch.zeros(2, 3), {"row_labels": ["a"]}, ValueError, "row_labels must have 2 entries, got 1"),
        (torch.zeros(2, 3), {"col_labels": ["a"]}, ValueError, "col_labels must have 3 entries, got 1"),
    ],
)
def test_plot_matrix_rejects_bad_input(matrix, kwargs, error, pattern):
    fig, ax = plt.subplots()
    try:
        with pytest.raises(error, match=pattern):
            plot_matrix(ax, matrix, **kwargs)
    finally:
        plt.close(fig)


# A figure is shown at the text column's width: about 358 CSS pixels on a phone, 750 on a desktop.
# A row of eight panels in a 13-inch figure left each panel 45 pixels wide on a phone, its curves
# and labels unreadable (chapter 9's accuracy and passkey figures, mended to grids of four
# columns). Every figure of the book keeps at most four panels in a row, each at least 2.5 inches
# of the figure's width (about 70 pixels on a phone, with 9-point labels in proportion).
MAX_COLUMNS = 4
MIN_PANEL_WIDTH_IN = 2.5


def _subplot_calls():
    """(notebook, cell index, columns, figure width in inches) of every plt.subplots call."""
    for path in CHAPTERS:
        cells = json.loads(path.read_text())["cells"]
        for index, cell in enumerate(cells):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "subplots" not in source:
                continue
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            for node in ast.walk(ast.parse("\n".join(lines))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "subplots"):
                    continue
                args = [ast.literal_eval(a) for a in node.args]
                keywords = {k.arg: k.value for k in node.keywords}
                columns = args[1] if len(args) > 1 else ast.literal_eval(keywords.get("ncols", ast.Constant(1)))
                size = keywords.get("figsize")
                width = ast.literal_eval(size)[0] if size is not None else 6.4  # posenc.plotting's default
                yield path.name, index, columns, width


def test_figure_panels_are_wide_enough_to_read_on_a_phone():
    calls = list(_subplot_calls())
    assert len(calls) >= 20, calls  # the scan finds the book's figures
    narrow = [
        f"{name} cell {index}: {columns} columns in {width} in"
        for name, index, columns, width in calls
        if columns > MAX_COLUMNS or width / columns < MIN_PANEL_WIDTH_IN
    ]
    assert not narrow, narrow
