"""Sphinx extension: an inline formula and the particle or punctuation after it stay on one line.

Korean attaches a particle to the word before it ("$d$가", "$L_0$보다"). Written with a space
("$d$ 가") or without one, the browser may still break the line between the formula (an atomic
inline box once MathJax has drawn it) and the particle, and a line then starts with a bare "가" or
". 논문은". This post-transform wraps each inline formula together with what is attached to it
into ``<span class="math-keep">`` (one inline-block box, book/_static_files/book.css, that wraps
inside only where the pair is wider than the whole line):

- a particle or copula ending (``PARTICLES``), with or without a space before it in the source:
  the space is dropped, since Korean spelling writes the particle against the word;
- punctuation that cannot start a line (``. , ) : ;``), the space before it dropped too;
- any other text written against the formula with no space ("$i$번째"), up to the next space.

Only the rendered page changes: the source keeps its spacing. tests/site/test_layout.py checks
that no rendered line starts with a particle or punctuation right after a formula.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

#: Particles and copula endings that attach to the word before them, longest first.
PARTICLES: tuple[str, ...] = tuple(
    sorted(
        {
            "이", "가", "은", "는", "을", "를", "의", "에", "와", "과", "로", "으로", "도", "만", "에서",
            "까지", "부터", "보다", "처럼", "마다", "만큼", "씩", "이다", "이고", "이며", "이면", "이나",
            "나", "이라", "이란", "라", "란", "로는", "으로는", "로도", "으로도", "로서", "으로서", "로써",
            "으로써", "에는", "에도", "에서는", "에서도", "에서의", "와는", "과는", "와의", "과의", "보다는",
            "까지는", "까지의", "부터는", "에게", "이므로", "이지만", "이어야", "여야", "이어서", "이라는",
            "라는", "인", "번째", "이면서", "이라면", "라면", "이거나", "거나", "으로의", "로의", "만을",
            "만이", "은데", "인데", "이라고", "라고", "조차", "뿐",
        },
        key=len,
        reverse=True,
    )
)  # fmt: skip

#: What may not start a line after a formula.
PUNCTUATION = ".,):;?!"
_END = rf"(?=$|\s|[{re.escape(PUNCTUATION)}\]'\"\u2019\u201d])"
_ATTACHED = re.compile(
    rf"^\s*(?:(?:{'|'.join(PARTICLES)}){_END}[{re.escape(PUNCTUATION)}]*|[{re.escape(PUNCTUATION)}]+)"
)
_WRITTEN_AGAINST = re.compile(r"^[^\s]+")


def attached_text(following: str) -> tuple[str, str] | None:
    """Split the text after a formula into (what joins the formula, the rest), or None.

    The joined part has no leading space: "가 커지면" -> ("가", " 커지면"), " . 논문은" ->
    (".", " 논문은"), "번째 행" -> ("번째", " 행"), " 차원" -> None.
    """
    match = _ATTACHED.match(following)
    if match:
        return match.group(0).lstrip(), following[match.end() :]
    match = _WRITTEN_AGAINST.match(following)
    if match:
        return match.group(0), following[match.end() :]
    return None


class KeepMathWithParticles(SphinxPostTransform):
    """Wrap each inline formula and the text attached to it in one span (HTML builders)."""

    default_priority = 800
    formats = ("html",)

    def run(self, **kwargs: object) -> None:
        # Text nodes compare as strings, so every change here goes by position, never by value.
        for math in list(self.document.findall(nodes.math)):
            parent = math.parent
            if parent is None:
                continue
            index = next(i for i, child in enumerate(parent.children) if child is math)
            if index + 1 >= len(parent) or not isinstance(parent[index + 1], nodes.Text):
                continue
            # MyST writes a line break of the source as a Text node of its own ("\n"): join it with
            # the text after it, so that "$x$\n가" is seen as one "\n가".
            while index + 2 < len(parent) and isinstance(parent[index + 2], nodes.Text):
                parent[index + 1] = nodes.Text(str(parent[index + 1]) + str(parent[index + 2]))
                del parent[index + 2]
            split = attached_text(str(parent[index + 1]))
            if split is None:
                continue
            joined, rest = split
            group = nodes.inline(classes=["math-keep"])
            parent[index] = group
            group += math
            group += nodes.Text(joined)
            if rest:
                parent[index + 1] = nodes.Text(rest)
            else:
                del parent[index + 1]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_post_transform(KeepMathWithParticles)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
