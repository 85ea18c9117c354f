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


# --- The print edition: contents page, outline, links, web-only sentences -------------------------


def outline_items(reader, items=None, depth=0):
    """(depth, title, page index) of every bookmark, in order."""
    for item in reader.outline if items is None else items:
        if isinstance(item, list):
            yield from outline_items(reader, item, depth + 1)
        else:
            yield depth, item.title, reader.get_destination_page_number(item)


def toc_parts() -> list[dict]:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]


def hangul_words(text: str) -> list[str]:
    return [w for w in re.findall(r"\S+", text) if HANGUL.search(w)]


def source_headings() -> list[str]:
    """Every heading of the book's sources (#, ##, ### ...), as written."""
    found = []
    for path in toc_files():
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
        else:
            text = path.read_text()
        found += re.findall(r"^#{1,6} (.+)$", text, re.M)
    return found


@pytest.fixture(scope="module")
def pages_text():
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(PDF)
    return [squeeze(document[i].get_textpage().get_text_range()) for i in range(len(document))]


def test_outline_is_contents_then_parts_with_their_chapters(reader):
    items = list(outline_items(reader))
    top = [title for depth, title, _ in items if depth == 0]
    names, count = [], 0
    for part in toc_parts():  # the print edition numbers the numbered parts: 제1부, 제2부, ...
        count += bool(part.get("numbered"))
        names.append(f"제{count}부 {part['caption']}" if part.get("numbered") else part["caption"])
    assert top == ["차례", title(toc_files()[0]), *names], top
    # under each part, its chapters in the order of _toc.yml
    for part_title, part in zip(names, toc_parts(), strict=True):
        start = next(i for i, item in enumerate(items) if item[0] == 0 and item[1] == part_title)
        chapters = []
        for depth, name, _ in items[start + 1 :]:
            if depth == 0:
                break
            if depth == 1:
                chapters.append(squeeze(name))
        wanted = [
            squeeze(title(path)) for c in part["chapters"] for path in toc_files() if path.stem == Path(c["file"]).name
        ]
        assert len(chapters) == len(wanted) and all(w in c for w, c in zip(wanted, chapters, strict=True)), (
            part_title,
            chapters,
        )


def hangul_only(text: str) -> str:
    return "".join(HANGUL.findall(text))


def test_bookmark_titles_read_as_the_headings(reader, pages_text):
    """No doubled section numbers, no spaces lost, and each bookmark opens the page its heading is
    on. (Formulas are left out of the comparison: the PDF's text has no characters for them.)"""
    words = {tuple(hangul_only(w) for w in hangul_words(h)) for h in source_headings()}
    parts = {p["caption"] for p in toc_parts()}
    faults = []
    for depth, name, page in outline_items(reader):
        if name == "차례" or (depth == 0 and (name in parts or name.startswith("제"))):
            continue
        if re.match(r"^(\d+(?:\.\d+)*\.) \1", name):
            faults.append(f"doubled number: {name!r}")
        if tuple(hangul_only(w) for w in hangul_words(name)) not in words:
            faults.append(f"not a heading of the sources (a space lost?): {name!r}")
        if hangul_only(name)[:10] not in hangul_only(pages_text[page]):
            faults.append(f"{name!r} is not on the page its bookmark opens ({page + 1})")
    assert not faults, "\n".join(faults[:20])


def contents_lines(reader) -> list[str]:
    """The contents page's lines as printed (title and page number), from its links: each line is
    one link, and the text inside the link's rectangle is the line."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(PDF)
    first_heading = min(page for _, _, page in outline_items(reader) if page > 1)
    lines = []
    for index in range(1, first_heading):
        textpage = document[index].get_textpage()
        for annotation in reader.pages[index].get("/Annots") or []:
            annotation = annotation.get_object()
            if annotation.get("/Subtype") == "/Link":
                left, bottom, right, top = (float(v) for v in annotation["/Rect"])
                lines.append(squeeze(textpage.get_text_bounded(left, bottom, right, top)))
    return lines


def test_contents_page_gives_each_chapter_its_page(reader, pages_text):
    """The contents page (after the cover) lists every chapter with the page its bookmark opens,
    and the chapter's title is on that page."""
    assert pages_text[1].startswith("차례")
    lines = contents_lines(reader)
    bookmarks = [(squeeze(name), page) for depth, name, page in outline_items(reader) if depth <= 1]
    faults = []
    for path in toc_files():
        found = [(key, page) for key, page in bookmarks if re.sub(r"^[\d.]+", "", key) == squeeze(title(path))]
        if not found:
            faults.append(f"no bookmark for {title(path)}")
            continue
        key, page = found[0]
        if not any(line.startswith(key) and line.removeprefix(key) == str(page + 1) for line in lines):
            faults.append(f"the contents do not give {title(path)!r} page {page + 1}")
        if hangul_only(title(path))[:10] not in hangul_only(pages_text[page]):
            faults.append(f"{title(path)!r} is not on page {page + 1}")
    assert len(lines) >= len(toc_files()), f"only {len(lines)} lines in the contents"
    assert not faults, "\n".join(faults)


def test_no_link_points_to_the_build_server(reader):
    local = []
    for number, page in enumerate(reader.pages, 1):
        for annotation in page.get("/Annots") or []:
            action = annotation.get_object().get("/A") or {}
            uri = str(action.get("/URI", ""))
            if re.match(r"https?://(127\.0\.0\.1|localhost)", uri):
                local.append((number, uri))
    assert not local, f"{len(local)} links to the build-time server, e.g. {local[:3]}"


def test_no_sentence_only_a_web_reader_can_follow(text):
    """Sentences about sliders, buttons and clicks say that they are about the web edition (the
    set-up cell's "눌러서 코드 보기" is not printed at all)."""
    sentences = re.split(r"(?<=[.다])\s", re.sub(r"\s+", " ", text))
    web_only = [s for s in sentences if re.search(r"슬라이더|버튼|클릭|눌러", s) and "웹판" not in s]
    assert not web_only, f"{len(web_only)} web-only sentences, e.g. {web_only[:3]}"
