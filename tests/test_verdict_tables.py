"""A table in the prose that reports verdicts computed in a code cell says what the cell printed.

Chapter 13 (book/13_real_text.ipynb) judges the papers' claims in a code cell: CLAIMS holds each
claim's verdict ("agrees", "partly", "disagrees", "cannot tell"), the cell prints one line per claim
(nbval compares that output with the stored one) and its asserts fix the verdicts. The Markdown table
after it reports them in Korean, one row per claim of a paper; a row can stand for several printed
claims (the same claim at four factors). Here each row is mapped to the printed claims it reports, and
the row's verdict must be theirs: a row that says "같다" for a claim the cell found "disagrees" fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "book" / "13_real_text.ipynb"
WORDS = {"agrees": "같다", "partly": "일부만 같다", "disagrees": "다르다", "cannot tell": "가릴 수 없다"}
NOT_JUDGED = "판정하지 않는다"
FACTORS = (2, 4, 8, 16)
# The start of a row's first column -> the printed claims the row reports.
ROWS = {
    "사인·코사인은 학습 길이를 넘으면": ["sinusoidal worse just past L_0 (ALiBi paper)"],
    "RoPE도 학습 길이를 넘으면": ["RoPE worse just past L_0 (ALiBi paper)"],
    "T5 편향도 나빠지지만": ["T5 bias worse at 16 L_0 (ALiBi paper)", "T5 bias worsens less than sin. and RoPE"],
    "ALiBi는 길어져도": ["ALiBi not worse at 16 L_0 (ALiBi paper)", "ALiBi better than sin., RoPE, T5 at 16 L_0"],
    "NoPE가 다른 위치 방식보다": ["NoPE worsens less than every other (NoPE paper)"],
    "외삽은 attention 점수를": [f"PI beats no scaling, alpha {a} (PI paper)" for a in FACTORS],
    "추가 학습 없이 NTK 방식, YaRN이": [
        f"{m} beats PI untuned, alpha {a} (YaRN paper)" for m in ("YaRN", "NTK") for a in FACTORS
    ],
    "PI는 짧은 미세 조정으로": ["PI better after a short fine-tune (PI paper)"],
    "외삽한 채 미세 조정하면": [],
    "같은 미세 조정 뒤 YaRN이": ["YaRN beats PI after the same tune (YaRN paper)"],
}


def printed_claims(nb) -> dict[str, str]:
    """{claim: verdict} from the output of the code cell that defines CLAIMS."""
    cells = [c for c in nb.cells if c.cell_type == "code" and "CLAIMS = {" in c.source]
    assert len(cells) == 1, "one code cell defines CLAIMS"
    text = "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream")
    verdicts = "|".join(map(re.escape, WORDS))
    found = dict(re.findall(rf"^(.+?)\s+({verdicts})$", text, re.MULTILINE))
    assert found, "the CLAIMS cell printed no verdict"
    return found


def table_rows(nb) -> dict[str, str]:
    """{first column: third column} of the Markdown table whose header is 주장 | 출처 | 이 작은 실험에서."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "| 주장 | 출처 | 이 작은 실험에서 |" in cell.source:
            rows = [line.split("|")[1:-1] for line in cell.source.splitlines() if line.startswith("| ")]
            return {row[0].strip(): row[2].strip().replace("**", "") for row in rows[1:]}
    raise AssertionError("no table of verdicts in the chapter")


def said_rightly(said: str, verdicts: list[tuple[int | None, str]]) -> bool:
    """Whether a row's verdict column says these verdicts: one word, alone before the row's first
    parenthesis, full stop or colon; or, when the factors differ, the first verdict with its factors in
    the parenthesis after it ("다르다 ($\\alpha = 2, 4$...") and each other one after its factors
    ("$\\alpha = 8, 16$에서는 가릴 수 없다")."""
    groups: dict[str, list[str]] = {}
    for factor, verdict in verdicts:
        groups.setdefault(verdict, []).append(str(factor))
    if len(groups) == 1:
        return re.split(r" \(|[.:]", said, maxsplit=1)[0].strip() == WORDS[next(iter(groups))]
    (first, factors), *others = groups.items()
    if not said.startswith(f"{WORDS[first]} ($\\alpha = {', '.join(factors)}$"):
        return False
    return all(f"$\\alpha = {', '.join(f)}$에서는 {WORDS[v]}" in said for v, f in others)


def problems(nb) -> list[str]:
    """Where the table and the printed verdicts disagree (empty when they agree)."""
    claims, rows = printed_claims(nb), table_rows(nb)
    found = []
    # every printed claim is reported by exactly one row, and every row is mapped
    mapped = [c for names in ROWS.values() for c in names]
    if sorted(mapped) != sorted(claims) or len(rows) != len(ROWS):
        found.append("the rows do not report the printed claims one to one")
    for start, names in ROWS.items():
        matching = [r for r in rows if r.startswith(start)]
        if len(matching) != 1:
            found.append(f"no single row starts with {start!r}")
            continue
        said = rows[matching[0]]
        if not names:
            if not said.startswith(NOT_JUDGED):
                found.append(f"{start}: {said!r}, expected {NOT_JUDGED}")
            continue
        verdicts = [(int(m.group(1)) if (m := re.search(r"alpha (\d+)", n)) else None, claims[n]) for n in names]
        if not said_rightly(said, verdicts):
            found.append(f"{start}: {said!r} does not say {verdicts}")
    return found


def test_the_chapter_13_table_reports_the_verdicts_the_cell_computed():
    assert problems(nbformat.read(NOTEBOOK, as_version=4)) == []


def test_a_row_that_says_what_the_cell_did_not_find_fails():
    """Planted in copies: the T5 row says 다르다; the PI row says 같다, or swaps its factors between
    다르다 and 가릴 수 없다 (the cell: disagrees at 2 and 4, cannot tell at 8 and 16)."""
    plants = (
        ("T5 편향도 나빠지지만", "| 같다 |", "| 다르다 |"),
        ("외삽은 attention 점수를", "**다르다**", "같다"),
        ("외삽은 attention 점수를", "$\\alpha = 2, 4$에서 외삽이", "$\\alpha = 8, 16$에서 외삽이"),
        ("외삽은 attention 점수를", "$\\alpha = 8, 16$에서는 가릴 수 없다", "$\\alpha = 8$에서는 가릴 수 없다"),
    )
    for start, old, new in plants:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "markdown" and "| 주장 | 출처 |" in c.source)
        lines = cell.source.splitlines()
        row = next(i for i, line in enumerate(lines) if line.startswith(f"| {start}"))
        assert old in lines[row], old
        lines[row] = lines[row].replace(old, new)
        cell.source = "\n".join(lines)
        assert any(p.startswith(start) for p in problems(nb)), (start, new)
