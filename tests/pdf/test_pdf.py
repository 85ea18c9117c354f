"""The PDF edition (make pdf): complete, typeset, linked, and looked at.

Checks the built PDF edition (_build/pdf/, named in _config.yml): every chapter's title is in its text; no TeX source
was left untypeset; the page count is sane; in-document links (cross-references, citations)
point to destinations that exist; the outline lists the chapters. A few pages are saved as PNGs
under _build/screenshots/ for review by eye.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PDF = ROOT / "_build" / "pdf" / yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["book_pdf"]
SCREENSHOTS = ROOT / "_build" / "screenshots"
# Math delimiters never survive typesetting; TeX commands are looked for in prose lines only
# (code cells legitimately hold matplotlib labels such as r"$\theta_i$").
DELIMITERS = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$")
COMMANDS = re.compile(r"\\(?:frac|begin|theta|times|mathbb|sqrt|left|right)\b")
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def toc_files() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    found = []
    for name in files:
        for suffix in (".ipynb", ".md"):
            if (ROOT / (name + suffix)).is_file():
                found.append(ROOT / (name + suffix))
    return found


def title(path: Path) -> str:
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        text = path.read_text()
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def reader():
    from pypdf import PdfReader

    if not PDF.is_file():
        pytest.fail(f"the PDF edition is not built: {PDF} is missing (run make pdf)")
    return PdfReader(PDF)


@pytest.fixture(scope="module")
def text(reader) -> str:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(PDF)
    return "\n".join(document[i].get_textpage().get_text_range() for i in range(len(document)))


def test_every_chapter_title_is_in_the_pdf(text):
    files = toc_files()
    assert len(files) >= 10
    missing = [title(f) for f in files if squeeze(title(f)) not in squeeze(text)]
    assert not missing, f"chapter titles missing from the PDF: {missing}"


def test_formulas_are_typeset(text):
    delimiters = sorted(set(DELIMITERS.findall(text)))
    prose = [line for line in text.splitlines() if HANGUL.search(line) and COMMANDS.search(line)]
    assert not delimiters, f"math delimiters left in the PDF text: {delimiters}"
    assert not prose, f"TeX commands in the PDF's prose: {prose[:3]}"
    assert "θ" in text and "\N{MULTIPLICATION SIGN}" in text  # typeset symbols are there instead


def test_page_count_is_sane(reader):
    assert 80 <= len(reader.pages) <= 600, len(reader.pages)


def test_internal_links_reach_their_destinations(reader):
    names = set(reader.named_destinations)
    links, broken = 0, []
    for number, page in enumerate(reader.pages, 1):
        for annotation in page.get("/Annots") or []:
            annotation = annotation.get_object()
            if annotation.get("/Subtype") == "/Link" and "/Dest" in annotation:
                links += 1
                if str(annotation["/Dest"]) not in names:
                    broken.append((number, str(annotation["/Dest"])))
    assert links >= 100, f"only {links} in-document links: cross-references were not kept"
    assert not broken, f"links to missing destinations: {broken[:5]}"


def test_outline_lists_the_chapters(reader):
    def titles(items):
        for item in items:
            if isinstance(item, list):
                yield from titles(item)
            else:
                yield item.title

    outline = [squeeze(t) for t in titles(reader.outline)]
    missing = [title(f) for f in toc_files() if not any(squeeze(title(f)) in t for t in outline)]
    assert not missing, f"not in the PDF outline: {missing}"


def test_save_pages_for_review(reader):
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(PDF)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pages = {0, 1, len(document) // 4, len(document) // 2, len(document) - 1}
    for index in sorted(pages):
        image = document[index].render(scale=1.5).to_pil()
        image.save(SCREENSHOTS / f"pdf-page-{index + 1:03d}.png")
        assert image.getbbox() is not None  # not blank
