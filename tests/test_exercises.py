"""Exercises: each chapter's exercise labels name that chapter, and each exercise has its solution.

A chapter notebook ``book/NN_name.ipynb`` is chapter ``NN``; its exercises are ``{exercise}``
directives labelled ``ex-chNN-...`` (``ex-ch6-base`` in chapter 6), so that a label read anywhere
says where the exercise lives, and renumbering a chapter cannot leave stale labels behind. Each
label has one ``{solution-start} label`` (a dropdown solution).
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

EXERCISE = re.compile(r"^\s*```+\{exercise\}[^\n]*\n\s*:label:\s*(\S+)", re.MULTILINE)
SOLUTION = re.compile(r"^\s*```+\{solution-start\}\s*(\S+)", re.MULTILINE)


def exercise_problems(chapter: int, markdown: str) -> list[str]:
    """What is wrong with the exercises of chapter ``chapter`` given its markdown text."""
    labels = EXERCISE.findall(markdown)
    solutions = SOLUTION.findall(markdown)
    problems = [f"{label}: not ex-ch{chapter}-..." for label in labels if not label.startswith(f"ex-ch{chapter}-")]
    problems += [f"{label}: no solution" for label in labels if solutions.count(label) != 1]
    problems += [f"{label}: solution of no exercise here" for label in solutions if label not in labels]
    return problems


def chapter_markdown(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")


def test_there_are_chapters_with_exercises():
    assert len(CHAPTERS) >= 11
    assert all(EXERCISE.search(chapter_markdown(path)) for path in CHAPTERS)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_exercise_labels_name_their_chapter_and_have_solutions(path):
    chapter = int(path.name[:2])
    assert exercise_problems(chapter, chapter_markdown(path)) == []


@pytest.mark.parametrize(
    ("chapter", "markdown", "expected"),
    [
        (6, "```{exercise}\n:label: ex-ch5-base\n\ntext\n```\n```{solution-start} ex-ch5-base\n```", "not ex-ch6"),
        (6, "```{exercise}\n:label: ex-ch6-base\n\ntext\n```", "no solution"),
        (6, "```{solution-start} ex-ch6-gone\n```", "solution of no exercise"),
    ],
)
def test_the_check_fails_on_planted_errors(chapter, markdown, expected):
    assert any(expected in problem for problem in exercise_problems(chapter, markdown))
