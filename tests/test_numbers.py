"""Numbers in the prose come from code: every number in a chapter's markdown is computed nearby or allowed.

The introduction promises that the book types no computed number by hand. This test makes the promise
checkable without building the book. For each markdown cell of a chapter notebook it reads every number
of the prose (inline formulas included: a number a formula computes, "$\\lceil 90.5 \\rceil = 91$",
counts too) and looks for the same value among the numbers of the **nearby code**:

* the number literals of the code cells of the same section (a heading ``#`` or ``##`` starts a
  section, also in the middle of a markdown cell): a constant the code sets, or a value an ``assert``
  states; a number in a comment or a string asserts nothing and does not count;
* their outputs, unless the cell is marked ``# NBVAL_IGNORE_OUTPUT``: nbval compares every other output
  character by character, so a printed number is as good as an assert; an ignored output is not;
* the chapter's constants: a number assigned to an upper-case name at the top level of any code cell
  (``TRAIN_LEN, TABLE_LEN = 24, 48``). The prose of every section refers to them, and changing the
  constant makes every sentence that still quotes the old value fail here.

The chapter's opening cell (its ``#`` title) and its ``핵심 정리`` box restate what the whole chapter
computes, so they are compared with the code of the whole chapter.

A prose number matches a code number when the code number rounds to it at the precision the prose
writes ("3.9" matches 3.87; "8%" matches 0.08 or 8.0; "5만" matches 50257 rounded to ten thousands).
A number glued with myst-nb's ``{glue}`` role never appears as digits in the markdown, so it passes.

Not read as numbers (each for a stated reason):

* code blocks, directive options (``:label:``), the targets of roles ({cite:p}, {numref}, {eq}, {ref})
  and links, labels, HTML: identifiers, not quantities;
* a number glued to a Latin letter or to a name by a hyphen (``float32``, ``2D``, ``GPT-2``, ``Phi-3``) and
  the version in a named model or library (``Llama 3``, ``T5 1.1``, ``Python 3.10``, "`posenc` 1.1"): names;
* the particle 만 ("only") after a number: "거리 3만 보면" is the distance 3, not 30000. 만 is read as ten
  thousand unless a verb follows it (ONLY: "3만 보면", "1만 돌리기"); "5만 토큰", "1만까지" are ten thousands;
* an integer from 0 to 10 with no unit: counts, indices and small constants ("$2 \\times 2$", "쌍 3개"),
  which every code cell contains anyway, so comparing them would prove nothing;
* the indices and exponents of a formula (``\\theta_{31}``, ``2^{26}``): notation; the value the formula
  computes ("$= 512$") is read, and so is a number in scientific notation ("$3 \\times 10^{-4}$" is 0.0003);
* a chapter, section, page or date ("5장", "3.4.1절", "2021년", "2024~2026년"), a section sign, and the
  number of a table, figure, appendix or issue in a cited work ("표 3", "부록 A.2", "이슈 #107884").

The .md pages (the introduction, the summary) have no code to compare with; the defaults and settings
they quote are asserted in the chapters.

What remains and is not computed is a fact reported by a cited paper or a published configuration
(BLEU 25.8 in the transformer paper, the p-RoPE paper's p = 0.75). Those are listed in ALLOWED, one entry
per phrase with its reason; an entry that no longer matches the book fails, so the list cannot go stale.
"""

import ast
import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest
from test_typography import MATH_SPAN, prose

ROOT = Path(__file__).resolve().parents[1]

# Every chapter notebook (chapter 12 is a .md page).
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

# Facts reported by a cited paper or a published model configuration: quoted, not computed.
# notebook name -> [(regular expression of the phrase, why it is quoted)]
ALLOWED: dict[str, list[tuple[str, str]]] = {
    "03_learned.ipynb": [
        (r"BLEU 25\.8", "the transformer paper's Table 3, base model on newstest2013: a reported result"),
        (r"BLEU 25\.7", "the same table, row (E) with a learned position table: a reported result"),
    ],
    "06_rope.ipynb": [
        (r"90° 회전", "the right angle names the map (a, b) -> (-b, a) of the same sentence, it measures nothing"),
    ],
    "08_variants.ipynb": [
        (r"\$p = 0\.75\$처럼", "the setting the p-RoPE paper trained its 2B model with, quoted with the citation"),
    ],
}

ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
LABEL = re.compile(r"^\([\w-]+\)=[ \t]*$", re.MULTILINE)
HTML = re.compile(r"<[^>]+>")
NAMED_VERSION = re.compile(
    r"\b(?:Code Llama|Llama|Gemma|Qwen|Phi|Mistral|T5|Python|PyTorch|transformers|CUDA|Jupyter Book|posenc)"
    r"`?[ -]?v?\d+(?:\.\d+)*"
)
SCRIPT = re.compile(r"[_^](?:\{[^{}]*\}|\\?\w)")  # a formula's subscript or superscript
CITED_PART = re.compile(r"(?:(?:§|표|그림|부록|식|이슈)[ \t]*|#)[A-Z]?\d[\d.]*")
YEAR_RANGE = re.compile(r"(?<!\d)(?:19|20)\d\d\s*[\u2013~-]\s*(?:19|20)\d\d(?!\d)")  # en dash too
NUMBER = re.compile(
    r"(?<![\w.\\])(?<![A-Za-z]-)(\d+(?:,\d{3})*(?:\.\d+)*)(?:[eE]([+-]?\d+))?(?![\w.]*[A-Za-z_])"
    r"[ \t]*(만|억|천|%)?"
)
STRUCTURE_AFTER = re.compile(r"[ \t]*(?:장|절|쪽|년|월|일)")
CODE_NUMBER = re.compile(r"(?<![\w.])(\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)")
UNIT = {"만": 1e4, "억": 1e8, "천": 1e3}
# 만 as the particle "only": a verb follows it ("3만 보면", "1만 돌리기", "3만 쓴다"), never a noun or counter
ONLY = re.compile(r"[ \t]+(?:보|봐|쓰|써|쓴|남|돌|알|읽|맞|있|없|하|해|한|되|돼|된|가리키|세)")
# a number in scientific notation inside a formula: "3 \times 10^{-4}", "2.42 \times 10^6"
SCIENTIFIC = re.compile(r"(\d+(?:\.\d+)?)[ \t]*\\times[ \t]*10\^(?:\{([+-]?\d+)\}|(\d))")
HEADING = re.compile(r"^#{1,2} ", re.MULTILINE)


def blank(text: str, pattern: re.Pattern) -> str:
    """The text with every match of the pattern replaced by spaces (offsets kept)."""
    return pattern.sub(lambda m: " " * len(m.group()), text)


def readable(markdown: str, allowed: list[str] = ()) -> str:
    """The prose of a markdown cell with everything that is not a quantity blanked out."""
    text = prose(markdown)
    for pattern in (ROLE, LINK_TARGET, LABEL, HTML, NAMED_VERSION, CITED_PART, YEAR_RANGE):
        text = blank(text, pattern)
    for phrase in allowed:
        text = blank(text, re.compile(phrase))
    text = SCIENTIFIC.sub(as_e_notation, text)  # also in a formula that runs over two lines
    out = list(text)
    for start, end in (m.span() for m in MATH_SPAN.finditer(text)):
        out[start:end] = blank(text[start:end], SCRIPT)
    return "".join(out)


def as_e_notation(m: re.Match) -> str:
    """'3 \\times 10^{-4}' -> '3e-4', padded to the same length (offsets kept)."""
    return f"{m.group(1)}e{m.group(2) or m.group(3)}".ljust(len(m.group()))


def code_numbers(text: str) -> set[float]:
    """Every number written in an output (10_000 and 1e-6 included)."""
    return {float(s.replace("_", "")) for s in CODE_NUMBER.findall(text) if s.replace("_", "")[-1].isdigit()}


def without_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def source_numbers(source: str) -> set[float]:
    """The number literals of a code cell; a number in a comment or a string states nothing and is left out."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(without_magics(source)).readline))
    except (tokenize.TokenError, SyntaxError):
        return code_numbers(source)
    return {float(ast.literal_eval(t.string)) for t in tokens if t.type == tokenize.NUMBER and "j" not in t.string}


def cell_numbers(cell) -> set[float]:
    """The numbers of a code cell's source and, unless nbval ignores them, of its outputs."""
    numbers = source_numbers(cell.source)
    if "NBVAL_IGNORE_OUTPUT" in cell.source:
        return numbers
    for output in cell.get("outputs", []):
        numbers |= code_numbers(output.get("text", ""))
        numbers |= code_numbers(output.get("data", {}).get("text/plain", ""))
    return numbers


def prose_numbers(text: str):
    """(value, tolerance, the number as written, offset) for each number of a readable() text to check."""
    for m in NUMBER.finditer(text):
        digits, exponent, unit = m.groups()
        if STRUCTURE_AFTER.match(text, m.end(1)) or digits.count(".") > 1:
            continue  # a chapter, section or date; 3.4.1 is a section number
        if unit == "만" and ONLY.match(text, m.end()):
            unit = None  # the particle "only": "거리 3만 보면" is the distance 3
        value = float(digits.replace(",", ""))
        if not unit and not exponent and "." not in digits and value <= 10:
            continue
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        scale = UNIT.get(unit, 1.0) * (10.0 ** int(exponent) if exponent else 1.0)
        written = m.group().strip() if unit or not m.group(3) else m.group(1)  # "12만 보면" -> "12"
        yield value * scale, 0.5 * 10.0**-decimals * scale, written, m.start()


def found(value: float, tolerance: float, written: str, numbers: set[float]) -> bool:
    """Whether some code number rounds to the prose number (a percentage may be written as a fraction)."""
    targets = [(value, tolerance)]
    if written.endswith("%"):
        targets.append((value / 100, tolerance / 100))
    return any(abs(x - t) <= tol * (1 + 1e-9) + 1e-12 for x in numbers for t, tol in targets)


def constants(source: str) -> set[float]:
    """The numbers assigned to upper-case names at the top level of a code cell (IPython magics skipped)."""
    try:
        tree = ast.parse(without_magics(source))
    except SyntaxError:
        return set()
    numbers = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names = [n for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if names and all(n.id.isupper() for n in names):
                numbers |= {
                    float(c.value)
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and type(c.value) in (int, float)
                }
    return numbers


def section_at_start_of_each_cell(cells) -> list[int]:
    """The number of section headings before each cell (a heading may sit in the middle of a markdown cell)."""
    section, sections = 0, []
    for cell in cells:
        sections.append(section)
        if cell.cell_type == "markdown":
            section += len(HEADING.findall(prose(cell.source)))
    return sections


def whole_chapter(cell) -> bool:
    """The chapter's opening cell and its summary box restate what the whole chapter computes."""
    return bool(re.search(r"^# ", cell.source, re.MULTILINE)) or "핵심 정리" in cell.source


def unchecked_numbers(nb, allowed: list[str] = ()) -> list[str]:
    """'cell N: number in context' for each number of the notebook's prose that no nearby code gives."""
    cells = nb.cells
    sections = section_at_start_of_each_cell(cells)
    by_section: dict[int, set[float]] = {}  # section -> the numbers of its code cells
    chapter_constants: set[float] = set()
    for cell, section in zip(cells, sections, strict=True):
        if cell.cell_type == "code":
            by_section.setdefault(section, set()).update(cell_numbers(cell))
            chapter_constants |= constants(cell.source)
    chapter = set().union(*by_section.values())
    problems = []
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        text = readable(cell.source, allowed)
        for value, tolerance, written, offset in prose_numbers(text):
            if whole_chapter(cell):
                numbers = chapter
            else:
                section = sections[index] + len(HEADING.findall(text, 0, offset))
                numbers = chapter_constants | by_section.get(section, set())
            if not found(value, tolerance, written, numbers):
                context = re.sub(r"\s+", " ", text[max(0, offset - 30) : offset + 20])
                problems.append(f"cell {index}: {written} in '{context.strip()}'")
    return problems


def stale_allowances(nb, allowed: list[tuple[str, str]]) -> list[str]:
    text = "\n".join(prose(c.source) for c in nb.cells if c.cell_type == "markdown")
    return [phrase for phrase, _ in allowed if not re.search(phrase, text)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_number_in_the_prose_is_computed_nearby(path):
    nb = nbformat.read(path, as_version=4)
    allowed = ALLOWED.get(path.name, [])
    assert stale_allowances(nb, allowed) == []
    assert unchecked_numbers(nb, [phrase for phrase, _ in allowed]) == []


def test_every_allowance_gives_a_reason_and_names_a_checked_chapter():
    names = {p.name for p in CHAPTERS}
    for name, entries in ALLOWED.items():
        assert name in names, name
        for phrase, reason in entries:
            assert re.compile(phrase) and len(reason) > 20, (name, phrase)


def notebook(*cells):
    """A small notebook: a (source, stdout) pair is a code cell with that output, a string a markdown cell."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        if isinstance(cell, tuple):
            source, output = cell
            code = nbformat.v4.new_code_cell(source)
            code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
            nb.cells.append(code)
        else:
            nb.cells.append(nbformat.v4.new_markdown_cell(cell))
    return nb


@pytest.mark.parametrize(
    ("nb", "expected"),
    [
        # a typed number nobody computes
        (notebook("## A\n\n정확도는 87.5%다.", ("x = 1", "")), ["87.5%"]),
        # printed, but by a cell nbval does not compare
        (notebook("## A\n\n정확도는 87.5%다.", ("# NBVAL_IGNORE_OUTPUT\nprint(acc)", "0.875\n")), ["87.5%"]),
        # computed, but in another section
        (notebook("## A\n\n오차는 0.031이다.", "## B", ("print(err)", "0.0312\n")), ["0.031"]),
        (notebook("## A", ("print(err)", "0.0312\n"), "끝.\n\n## B\n\n오차는 0.031이다."), ["0.031"]),
        # a number in a comment asserts nothing
        (notebook("## A\n\n오차는 0.031이다.", ("x = f()  # 0.031", "")), ["0.031"]),
        # a formula's result counts; its exponents do not
        (notebook("## A\n\n$\\lceil 8 \\cdot 2^{3.5} \\rceil = 91$이다.", ("x = 1", "")), ["91"]),
        # a lower-case name is not a chapter constant
        (notebook("## A", ("train_len = 24", ""), "## B\n\n길이 24의 시퀀스."), ["24"]),
        # the same number with a Korean unit
        (notebook("## A\n\n약 5만 개다.", ("n = 40_000", "")), ["5만"]),
        # 만 as "only" leaves the number itself, which is then checked
        (notebook("## A\n\n거리 12만 보면 된다.", ("n = 120_000", "")), ["12"]),
        # a number in scientific notation, also in a formula over two lines
        (notebook("## A\n\n오차는 $3 \\times 10^{-4}$이다.", ("x = 1", "")), ["3e-4"]),
        (notebook("## A\n\n$m \\approx\n2.42 \\times 10^6$에서", ("print(2.42)", "2.42\n")), ["2.42e6"]),
    ],
)
def test_the_check_finds_planted_numbers(nb, expected):
    problems = unchecked_numbers(nb)
    assert [p.split(": ")[1].split(" in ")[0] for p in problems] == expected


@pytest.mark.parametrize(
    "nb",
    [
        notebook("## A\n\n정확도는 87.5%다.", ("print(acc)", "0.875\n")),
        notebook("## A\n\n오차는 0.031이다.", ("assert abs(err - 0.0312) < 1e-4", "")),
        notebook("## A\n\n약 5만 개다.", ("print(vocab)", "50257\n")),
        notebook("## A\n\n2.3절과 5장, 2021년, 표 3, Llama 3.1, float32, $\\theta_{31}$, 2D, 쌍 7개."),
        notebook("## A\n\n값은 {glue:text}`ratio`다."),
        notebook("# 제목\n\n값은 1024다.", "## A", ("print(n)", "1024\n")),
        notebook("## A", ("TRAIN_LEN, TABLE_LEN = 24, 48", ""), "## B\n\n길이 48의 시퀀스."),
        notebook("## A", ("print(err)", "0.0312\n"), "오차는 0.031이다.\n\n## B\n\n다음 절."),
        notebook("## A\n\n거리 3만 보면 되고 4분의 1만 돌린다. `posenc` 1.1에서 고쳤다."),
        notebook("## A\n\n오차는 $3 \\times 10^{-4}$이다.", ("print(err)", "3.1e-04\n")),
        notebook("## A\n\n위치 1만까지, $8.7 \\times 10^5$ 근처.", ("n = 10_000\nx = 870_000", "")),
    ],
)
def test_the_check_passes_computed_and_structural_numbers(nb):
    assert unchecked_numbers(nb) == []


def test_an_allowance_blanks_its_phrase_and_a_stale_one_is_reported():
    nb = notebook("## A\n\nBLEU 25.8을 얻었다.")
    assert unchecked_numbers(nb) != []
    assert unchecked_numbers(nb, [r"BLEU 25\.8"]) == []
    assert stale_allowances(nb, [(r"BLEU 27\.3", "reported by the paper")]) == [r"BLEU 27\.3"]
