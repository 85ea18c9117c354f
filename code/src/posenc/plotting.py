"""The book's shared figure style and figure helpers.

Every notebook calls :func:`use_book_style` once, so figures look alike and stay readable
in the site's light and dark themes: they are drawn on an opaque white background, never
on a transparent one. Labels are English or math notation only (Colab has no Korean font).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.image import AxesImage

from posenc._checks import check_tensor

__all__ = ["BOOK_STYLE", "plot_matrix", "use_book_style"]

#: rcParams applied by :func:`use_book_style`.
BOOK_STYLE: dict[str, object] = {
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 100,
    # Opaque white figures stay readable on the dark theme's dark page background.
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.transparent": False,
    "axes.grid": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "image.cmap": "viridis",
}


def use_book_style() -> None:
    """Apply the book's figure style (:data:`BOOK_STYLE`) to matplotlib.

    In a Jupyter kernel with the inline backend, figures are also stored at twice their pixel
    density ("retina" PNG, shown at their normal size), so they stay sharp on HiDPI screens.
    Outside a kernel (scripts, tests) only the rcParams change.
    """
    mpl.rcParams.update(BOOK_STYLE)
    _use_hidpi_inline_figures()


def _use_hidpi_inline_figures() -> bool:
    """Ask Jupyter's inline backend for retina PNGs; return whether a kernel was there to ask."""
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return False
    if get_ipython() is None:
        return False
    set_matplotlib_formats("retina")
    return True


def plot_matrix(
    ax: Axes,
    matrix: torch.Tensor | np.ndarray,
    *,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str | None = None,
    annotate: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str | None = None,
) -> AxesImage:
    """Draw a 2-D matrix (attention weights, similarities, tables) as a heatmap on ``ax``.

    Shapes:
        matrix: ``(rows, cols)``; rows are drawn top to bottom (query or position axis).
    """
    if isinstance(matrix, torch.Tensor):
        check_tensor("matrix", matrix, ndim=2)
        matrix = matrix.detach().cpu().double().numpy()
    elif isinstance(matrix, np.ndarray):
        if matrix.ndim != 2:
            raise ValueError(f"matrix must have 2 dimensions, got shape {matrix.shape}")
    else:
        raise TypeError(f"matrix must be a torch.Tensor or numpy.ndarray, got {type(matrix).__name__}")
    rows, cols = matrix.shape
    for name, labels, size in (("row_labels", row_labels, rows), ("col_labels", col_labels, cols)):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} must have {size} entries, got {len(labels)}")

    image = ax.imshow(matrix, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto", interpolation="nearest")
    if row_labels is not None:
        ax.set_yticks(range(rows), row_labels)
    if col_labels is not None:
        ax.set_xticks(range(cols), col_labels, rotation=45, ha="right")
    if annotate:
        lo, hi = image.get_clim()
        mid = (lo + hi) / 2
        for r in range(rows):
            for c in range(cols):
                value = matrix[r, c]
                ax.text(
                    c,
                    r,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if value > mid else "white",
                )
    if title is not None:
        ax.set_title(title)
    return image
