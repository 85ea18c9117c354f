"""Korean typography of the book's prose: the markdown cells of the notebooks and the .md pages in book/.

Two rules, both checked without building the book:

* A particle or copula ending is written directly after a bold span, a code span or an inline formula:
  "**위치**다", "$d$가", "$L_0$까지를",
  "`posenc.apply_rope`는", "{numref}`...`에서". A space there ("**위치** 다", "`x` 는") is an error.
  A MyST role ({cite:p}`...`, {eq}`...`, {numref}`...`) ends in a code-span backtick and is checked too.
  The word after the span is an error only when the whole Hangul run is a particle or ending from
  PARTICLES (optionally followed by one of the secondary particles 는 도 만 의, as in 에서는, 으로만,
  와의). A prefix match would flag ordinary words ("**스칼라** 하나", "**같은** 위치"), so forms of 하다 and
  시키다 are left out on purpose: "**위치마다 달라야** 한다" and "**동시에** 한 바퀴" are correctly
  spaced, while a noun + 하다 such as "**학습**한다" is fixed by hand. A bold span that ends in
  sentence punctuation (". ? ! :") is a run-in label ("**T5.** 이 방식은 ...") and is skipped.
* A bold span whose last character is punctuation must not be followed directly by a letter: by the
  CommonMark rules "**편향(bias)**는" is not bold at all and shows the asterisks. Write the parenthesis after
  the span instead: "**편향**(bias)는".
* The word "원문": the book refers to no source text the reader cannot see.
* A counter after a number written in digits is glued to it, as the book writes it everywhere: "16쌍",
  "0.1바퀴", "384개", "8배", "250칸" (Korean spelling allows both for Arabic numerals; the book chose one).
  After a formula the counter keeps its space ("$d/2$ 개", "$2L - 1$ 개"): a formula is not a numeral.

Fenced code blocks (``` or ~~~ with a language or no info string, and the code-like directives in
CODE_DIRECTIVES) and MyST directive option lines (":label: ...") are not prose and are not scanned;
the bodies of prose directives such as {exercise} are.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
PAGES = sorted(BOOK.glob("*.md"))
NOTEBOOKS = sorted(p for p in BOOK.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)

# Ambiguous one-syllable words that are also common nouns or adverbs (일, 자, 같이) are left out.
PARTICLE_WORDS = """
    은 는 이 가 을 를 의 에 에서 에게 께 한테 와 과 랑 이랑 로 으로 로서 으로서 로써 으로써 도 만 까지 부터 보다
    처럼 마다 만큼 조차 밖에 나 이나 든 이든 든지 이든지 라도 이라도 란 이란
    다 이다 이고 고 이며 며 이라 라 라는 이라는 라고 이라고 인 임 이면 면 이지만 지만 이므로 므로
    이자 야 이야 였다 이었다 였고 이었고 입니다 이에요 예요 이죠 죠 이어야 라서 이라서 인지 뿐
"""
PARTICLES = frozenset(PARTICLE_WORDS.split())
SECONDARY = "는도만의"
CODE_DIRECTIVES = {"{code}", "{code-block}", "{code-cell}", "{math}", "{bibliography}", "{eval-rst}"}

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(\S*)")
OPTION = re.compile(r"^\s*:[\w-]+:")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
BOLD = re.compile(r"\*\*(?=\S)((?:[^*]|\*(?!\*))+?)(?<=\S)\*\*")
PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]|[^\w\s]")  # ASCII punctuation or any other non-word symbol
AFTER = re.compile(r"[ \t]*\n?[ \t]*([가-힣]+)")
# Display math ($$ ... $$, possibly over lines) is matched first so that its dollars never pair with inline ones.
COUNTERS = ("쌍", "개", "바퀴", "배", "칸")
COUNTER_GAP = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[ \t]+(" + "|".join(COUNTERS) + r")([가-힣]*)")
MATH_SPAN = re.compile(r"(?<![\\$])\$\$.+?\$\$|(?<![\\$])\$(?!\$)[^$\n]+?(?<!\\)\$", re.DOTALL)


def prose(text):
    """The text with code blocks and directive option lines blanked out (every offset kept)."""
    out = []
    fence = None  # the marker of the open code block, if inside one
    directives = []  # the markers of the open prose directives ({exercise}, {note}, ...)
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2):
                fence = None
            out.append(" " * len(line))
            continue
        if m:
            marker, info = m.groups()
            if not info and directives and marker[0] == directives[-1][0] and len(marker) >= len(directives[-1]):
                directives.pop()
            elif info.startswith("{") and info not in CODE_DIRECTIVES:
                directives.append(marker)
            else:
                fence = marker
            out.append(" " * len(line))  # a fence line (``` or ```{exercise}) is not prose
            continue
        out.append(" " * len(line) if OPTION.match(line) else line)
    return "\n".join(out)


def is_particle(word):
    """A particle or ending, or two of them in a row (에서는, 까지를, 뿐이다): never a word of its own."""
    if word in PARTICLES:
        return True
    return any(word[:cut] in PARTICLES and word[cut:] in PARTICLES for cut in range(1, len(word)))


def bold_spans(text):
    """(start, end, content) of each bold span of a prose() text, with code spans masked (they may contain **)."""
    masked = list(text)
    for m in CODE_SPAN.finditer(text):
        masked[m.start() + 1 : m.end() - 1] = "x" * (m.end() - m.start() - 2)
    return [(m.start(), m.end(), m.group(1)) for m in BOLD.finditer("".join(masked))]


def math_spans(text):
    """(start, end) of each inline formula $...$ of a prose() text, with code spans masked (they may hold $)."""
    masked = list(text)
    for m in CODE_SPAN.finditer(text):
        masked[m.start() : m.end()] = "x" * (m.end() - m.start())
    return [m.span() for m in MATH_SPAN.finditer("".join(masked)) if not m.group().startswith("$$")]


def particle_gaps(text):
    """(span start, span end, particle start) for each span followed by a space and then a particle."""
    text = prose(text)
    spans = [m.span() for m in CODE_SPAN.finditer(text)]
    spans += [(start, end) for start, end, content in bold_spans(text) if content[-1] not in ".?!:"]
    spans += math_spans(text)
    for start, end in sorted(spans):
        after = AFTER.match(text, end)
        if after and after.start(1) > end and is_particle(after.group(1)):
            yield start, end, after.start(1)


def typography_errors(text):
    """Offending snippets in one markdown text: a space before a particle after a span, and 원문."""
    errors = []
    for start, _, particle in particle_gaps(text):
        line_start = text.rfind("\n", 0, start) + 1
        word_end = AFTER.match(text, particle).end()
        errors.append(text[max(line_start, start - 20) : word_end].replace("\n", "⏎"))
    clean = prose(text)
    for start, end, content in bold_spans(clean):
        if PUNCTUATION.match(content[-1]) and end < len(clean) and clean[end].isalnum():
            errors.append(f"broken bold: {clean[max(start, end - 30) : end + 5]}")
    errors += [f"원문: {line.strip()[:60]}" for line in clean.split("\n") if "원문" in line]
    errors += [f"spaced counter: {m.group()}" for m in counter_gaps(clean)]
    return errors


def counter_gaps(clean):
    """A number in digits, a space, then a counter alone or with a particle ("48 쌍이"), outside formulas and code."""
    masked = list(clean)
    for m in CODE_SPAN.finditer(clean):
        masked[m.start() : m.end()] = "x" * (m.end() - m.start())
    for m in MATH_SPAN.finditer("".join(masked)):
        masked[m.start() : m.end()] = "x" * (m.end() - m.start())
    text = "".join(masked)
    return [m for m in COUNTER_GAP.finditer(text) if not m.group(3) or is_particle(m.group(3))]


def markdown_sources():
    for page in PAGES:
        yield page.relative_to(ROOT), None, page.read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                yield path.relative_to(ROOT), index, cell.source


def test_the_book_has_prose_to_check():
    sources = list(markdown_sources())
    assert {path.name for path, _, _ in sources} >= {"intro.md", "12_summary.md", "01_why_position.ipynb"}
    assert len(sources) > 50


def test_no_space_before_a_particle_and_no_word_for_an_unseen_source():
    problems = [
        f"{path}" + ("" if index is None else f" cell {index}") + f": {snippet!r}"
        for path, index, text in markdown_sources()
        for snippet in typography_errors(text)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("wrong", "right"),
    [
        ("이웃한 **위치** 다.", "이웃한 **위치**다."),
        ("함수 `x` 는 값을 돌려준다.", "함수 `x`는 값을 돌려준다."),
        ("원문은 이렇게 말한다.", "흔한 설명은 이렇게 말한다."),
        ("{numref}`%s절 <sec-a>` 에서는 본다.", "{numref}`%s절 <sec-a>`에서는 본다."),
        ("**상대 위치\n표현** 이라 한다.", "**상대 위치\n표현**이라 한다."),
        ("`apply_rope`\n로 돌린다.", "`apply_rope`로 돌린다."),
        ("``a ` b`` 으로만 쓴다.", "``a ` b``으로만 쓴다."),
        ("**편향(bias)** 행렬은 **편향(bias)**을 담는다.", "**편향**(bias) 행렬은 **편향**(bias)을 담는다."),
        ("차원 $d$ 가 짝수다.", "차원 $d$가 짝수다."),
        ("$\\theta_i$ 와 $m$ 에서는 $n - m$ 뿐이다.", "$\\theta_i$와 $m$에서는 $n - m$뿐이다."),
        ("$L_0$\n까지를 본다.", "$L_0$까지를 본다."),
        ("48 쌍이 남고 0.1 바퀴 돈다.", "48쌍이 남고 0.1바퀴 돈다."),
        ("약 250 칸 앞, 8 배.", "약 250칸 앞, 8배."),
    ],
)
def test_the_checker_fails_on_planted_errors_and_passes_their_fixes(wrong, right):
    assert typography_errors(wrong)
    assert typography_errors(right) == []


@pytest.mark.parametrize(
    "fine",
    [
        "벡터는 **위치마다 달라야** 한다.",  # an auxiliary verb after the span, not a particle
        "모든 쌍이 **동시에** 한 바퀴를 채운다.",  # 한 is a determiner
        "**T5.** 이 방식은 캐시를 쓴다.",  # a run-in label ends in a full stop
        "**스칼라** 하나를 더한다. `(L, L)` 행렬이다.",  # ordinary words after the spans
        "```\n`x` 는 코드 블록 안\n```",  # a fenced code block is not prose
        "```{exercise}\n:label: x-원문\n\n`x`는 본문\n```",  # a directive's option line is not prose
        "$p$ 근처에서 $d/2$ 개의 쌍이 $L_0$ 안에서 돈다.",  # nouns after a formula keep their space
        "$\\lfloor 0.75 \\cdot 64 \\rfloor = 48$ 쌍, 배율 8 배열, 1024 토큰, `x = 3` 개수",  # formula, words
        "$$\nx = y\n$$\n\n이 식은 $a$, $b$ 와 무관하다가 아니라 `$x$ 는` 코드다.".replace(" 와", "와"),
    ],
)
def test_the_checker_passes_correct_prose(fine):
    assert typography_errors(fine) == []


def test_the_checker_scans_a_prose_directive_body():
    assert typography_errors("```{exercise}\n:label: x\n\n`x` 는 본문\n```")
