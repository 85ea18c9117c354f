"""Every chapter numbers its display equations and refers to each labelled one by its label."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LABEL = re.compile(r"\$\$\s*\((eq-[\w-]+)\)")
REFERENCE = re.compile(r"\{eq\}`(eq-[\w-]+)`")


def markdown(path):
    if path.suffix == ".ipynb":
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


PAGES = {p.name: markdown(p) for p in sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))}


def test_labels_are_unique_and_every_label_is_referenced():
    labels = [label for text in PAGES.values() for label in LABEL.findall(text)]
    assert len(labels) == len(set(labels)), "duplicate equation labels"
    references = {ref for text in PAGES.values() for ref in REFERENCE.findall(text)}
    assert not sorted(set(labels) - references), f"labelled but never referenced: {sorted(set(labels) - references)}"
    assert not sorted(references - set(labels)), f"referenced but not defined: {sorted(references - set(labels))}"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_display_equation_is_numbered_by_a_label(name):
    blocks = re.findall(r"\$\$(.*?)\$\$(\s*\(eq-[\w-]+\))?", PAGES[name], re.S)
    unlabelled = [body.strip()[:40] for body, label in blocks if not label]
    assert not unlabelled, f"{name}: display equations without a label: {unlabelled}"
