"""The introduction's notation table is the law: every Greek letter the book's formulas use is in it.

One symbol, one meaning (book/intro.md, section 기호). A Greek letter that appears in a formula of a
chapter or page but nowhere in the table is either a new symbol the table must declare, or an old
symbol used with a second meaning; either way the reader cannot look it up.

Latin letters are checked in display formulas ($$ ... $$) only: a single Latin letter there (``U`` in
the RNN's update, ``G`` in RoPE's requirement) must appear in some formula of the table. Inline formulas
are left out, because they are full of one-letter bound indices ("$t$ 단계", "$j$ 번째") that a
sentence introduces on the spot; a display formula is where a reader looks a symbol up. Letters
inside ``\\text{...}``, ``\\operatorname{...}``, ``\\mathrm{...}`` and the like are words, not symbols.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
GREEK = re.compile(
    r"\\(alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|pi|"
    r"varpi|rho|varrho|sigma|varsigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Pi|"
    r"Sigma|Upsilon|Phi|Psi|Omega)(?![A-Za-z])"
)
MATH = re.compile(r"\$\$(.+?)\$\$|\$([^$\n]+?)\$", re.DOTALL)
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
WORDS = re.compile(r"\\(?:text|textrm|operatorname|mathrm|mathbf|mathbb|mathcal)\s*\{[^{}]*\}")
COMMAND = re.compile(r"\\[A-Za-z]+")
LATIN = re.compile(r"(?<![A-Za-z])[A-Za-z](?![A-Za-z])")


def table_symbols(intro: str) -> set[str]:
    """Greek letters declared in the notation table (its rows start with '|')."""
    rows = "\n".join(line for line in intro.split("\n") if line.startswith("|"))
    return set(GREEK.findall(rows))


def latin_letters(tex: str) -> set[str]:
    """The single Latin letters of a formula, words (\\text{...}) and commands (\\frac) left out."""
    return set(LATIN.findall(COMMAND.sub(" ", WORDS.sub(" ", tex))))


def table_latin(intro: str) -> set[str]:
    """Latin letters used in the formulas of the notation table."""
    rows = "\n".join(line for line in intro.split("\n") if line.startswith("|"))
    return {letter for m in MATH.finditer(rows) for letter in latin_letters(m.group(0))}


def undeclared_latin(text: str, declared: set[str]) -> set[str]:
    """Latin letters of the display formulas of ``text`` that no formula of the table uses."""
    return {letter for m in DISPLAY.finditer(text) for letter in latin_letters(m.group(1))} - declared


def undeclared(text: str, declared: set[str]) -> set[str]:
    """Greek letters used in the formulas of ``text`` that the table does not declare."""
    return {g for m in MATH.finditer(text) for g in GREEK.findall(m.group(0))} - declared


def book_texts():
    for page in sorted(BOOK.glob("*.md")):
        yield page.name, page.read_text(encoding="utf-8")
    for path in sorted(BOOK.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        yield path.name, "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_every_greek_letter_in_a_formula_is_in_the_notation_table():
    declared = table_symbols((BOOK / "intro.md").read_text(encoding="utf-8"))
    assert {"theta", "alpha", "Delta"} <= declared
    problems = {name: sorted(undeclared(text, declared)) for name, text in book_texts()}
    assert not {k: v for k, v in problems.items() if v}, "declare these in book/intro.md's table"


def test_every_latin_letter_in_a_display_formula_is_in_the_notation_table():
    declared = table_latin((BOOK / "intro.md").read_text(encoding="utf-8"))
    assert {"L", "d", "q", "k", "W", "U", "G"} <= declared
    problems = {name: sorted(undeclared_latin(text, declared)) for name, text in book_texts()}
    assert not {k: v for k, v in problems.items() if v}, "declare these in book/intro.md's table"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("$$\ny_t = \\tanh(W x_t + U y_{t-1})\n$$", {"U"}),
        ("$$\n\\operatorname{clip}(r, -c, c) + \\text{base}^{2i/d}\n$$", set()),
        ("inline $U$ only, and \\frac{a}{b} outside math", set()),
    ],
)
def test_the_latin_check_finds_planted_undeclared_letters(text, found):
    assert undeclared_latin(text, {"y", "t", "W", "x", "r", "c", "i", "d"}) == found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("위상 $\\phi_i$와 각 $\\psi$", {"psi"}),
        ("$$\n\\epsilon = \\varrho\n$$", {"epsilon", "varrho"}),
        ("글자 \\psi는 수식 밖", set()),
    ],
)
def test_the_check_finds_planted_undeclared_letters(text, found):
    assert undeclared(text, {"phi", "theta"}) == found
