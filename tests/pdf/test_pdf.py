"""The PDF edition (make pdf): complete, typeset, linked, and looked at.

Checks the built PDF edition (_build/pdf/, named in _config.yml): every chapter's title is in its text; no TeX source
was left untypeset; the page count is sane; in-document links (cross-references, citations)
point to destinations that exist; the outline lists the chapters. A few pages are saved as PNGs
under _build/screenshots/ for review by eye.
"""

from __future__ import annotations

import json
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


# --- Running headers, one PDF per chapter, figures at their shape ----------------------------------

# The running header sits in the top margin (18 mm, tools/build_pdf.py), its text within 14 mm of
# the top; the band stops there, since a tall formula's glyphs (big brackets) reach a little above
# the text area. In PDF points.
HEADER_BAND = 14 * 72 / 25.4
CHAPTERS = ROOT / "_build" / "pdf" / "chapters"
SITE_CHAPTERS = ROOT / "_build" / "html" / "pdf"


def chapter_pages(reader) -> list[tuple[str, int, int]]:
    """(bookmark title, first page, end page) of each page of the book in order (the introduction,
    then each part's chapters), from the outline: a chapter runs to the next chapter's first page,
    less the part page before it."""
    items = list(outline_items(reader))
    part_titles = {title for depth, title, _ in items if depth == 0 and title.startswith("제")}
    part_titles |= {p["caption"] for p in toc_parts()}
    part_pages = {page for depth, title, page in items if depth == 0 and title in part_titles}
    starts, top = [], None
    for depth, title, page in items:
        if depth == 0:
            top = title
            if title != "차례" and title not in part_titles:
                starts.append((title, page))  # the root page
        elif depth == 1 and top in part_titles:
            starts.append((title, page))
    ranges = []
    for i, (title, start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(reader.pages)
        while end - 1 in part_pages and end - 1 > start:
            end -= 1
        ranges.append((title, start, end))
    return ranges


def top_band(document, index: int) -> str:
    """The text in the page's top band: its lines with a letter or digit (a formula cut at the foot
    of the page before leaves invisible bracket pieces there, which are not text)."""
    page = document[index]
    width, height = page.get_size()
    band = page.get_textpage().get_text_bounded(0, height - HEADER_BAND, width, height)
    return "\n".join(line.strip() for line in band.splitlines() if re.search(r"\w", line))


def test_running_headers_name_the_chapter(reader):
    """Every page of a chapter after its first carries the chapter's title at the top; the cover,
    the contents, the part pages and each chapter's opening page carry none."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(PDF)
    chapters = chapter_pages(reader)
    assert len(chapters) == len(toc_files()), [c[0] for c in chapters]
    in_chapter, faults = set(), []
    for title, start, end in chapters:
        for index in range(start, end):
            in_chapter.add(index)
            band = top_band(document, index)
            wanted = "" if index == start else squeeze(title)
            if squeeze(band) != wanted:
                faults.append(f"page {index + 1}: header {band!r}, expected {wanted or 'none'!r}")
    for index in sorted(set(range(len(document))) - in_chapter):  # cover, contents, part pages
        if top_band(document, index):
            faults.append(f"page {index + 1} (not a chapter's) has a header: {top_band(document, index)!r}")
    assert not faults, f"{len(faults)} pages:\n" + "\n".join(faults[:15])


def test_each_chapter_has_its_own_pdf(reader, pages_text):
    """_build/pdf/chapters/<name>.pdf holds exactly the chapter's pages of the book, opens on its
    title, has the chapter's bookmarks and no link to a missing destination; the site has a copy
    (the download menu's 이 장 PDF)."""
    import pypdfium2 as pdfium
    from pypdf import PdfReader

    chapters = chapter_pages(reader)
    faults = []
    for path, (title, start, end) in zip(toc_files(), chapters, strict=True):
        own = CHAPTERS / f"{path.stem}.pdf"
        if not own.is_file():
            faults.append(f"{own.name} is missing")
            continue
        chapter = PdfReader(own)
        if len(chapter.pages) != end - start:
            faults.append(f"{own.name}: {len(chapter.pages)} pages, the chapter has {end - start}")
            continue
        document = pdfium.PdfDocument(own)
        texts = [squeeze(document[i].get_textpage().get_text_range()) for i in range(len(document))]
        if texts != pages_text[start:end]:
            faults.append(f"{own.name}: its pages are not the book's pages {start + 1}-{end}")
        outline = [t for _, t, _ in outline_items(chapter)]
        if not outline or outline[0] != title:
            faults.append(f"{own.name}: its first bookmark is {outline[:1]}, not {title!r}")
        names = set(chapter.named_destinations)
        for page in chapter.pages:
            for annotation in page.get("/Annots") or []:
                annotation = annotation.get_object()
                if "/Dest" in annotation and str(annotation["/Dest"]) not in names:
                    faults.append(f"{own.name}: a link to the missing destination {annotation['/Dest']}")
        copy = SITE_CHAPTERS / own.name
        if not copy.is_file() or copy.read_bytes() != own.read_bytes():
            faults.append(f"the site has no current copy of {own.name} ({copy})")
    assert not faults, "\n".join(faults[:15])


def misshapen_images(path: Path, tolerance: float = 0.01) -> list[str]:
    """Every image placed in a PDF whose placed aspect ratio is off its pixels' ratio by more than
    ``tolerance`` (relative): a squashed or stretched figure. Images under 16 pixels on a side
    (rules, icons) are left out: one pixel of rounding is a large share of them."""
    import math

    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    faults = []
    document = pdfium.PdfDocument(path)
    for index in range(len(document)):
        for image in document[index].get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE]):
            width_px, height_px = image.get_px_size()
            if min(width_px, height_px) < 16:
                continue
            a, b, c, d, _, _ = image.get_matrix().get()  # the unit square -> the placed image
            placed = math.hypot(a, b) / math.hypot(c, d)
            natural = width_px / height_px
            if abs(placed / natural - 1) > tolerance:
                faults.append(f"page {index + 1}: a {width_px}x{height_px} image placed at ratio {placed:.3f}")
    return faults


def test_equation_numbers_stand_beside_their_equations_in_print():
    """On paper each equation's number sits to the right of its formula, on the same line. On a
    narrow screen book.css moves it above the formula; that rule used to apply on paper too, since
    an A4 page's text (673 px) is narrower than the rule's 48em. tools/build_pdf.py measures every
    numbered equation on the page it prints, at that width and with print media."""
    layout_file = PDF.parent / "print-layout.json"
    if not layout_file.is_file() or layout_file.stat().st_mtime < PDF.stat().st_mtime:
        pytest.fail(f"{layout_file} is missing or older than the PDF: run make pdf")
    layout = json.loads(layout_file.read_text())
    assert layout["width"] == 673 and layout["media_print"], layout  # A4 less the margins, printing
    numbers = layout["equation_numbers"]
    # every numbered equation of the book's pages was measured (the site's own pages count them)
    site_numbers = sum(p.read_text().count('class="eqno"') for p in (ROOT / "_build" / "html" / "book").glob("*.html"))
    assert len(numbers) == layout["numbered_in_html"] == site_numbers > 0, (len(numbers), site_numbers)
    faults = [e["label"] for e in numbers if not e["besideFormula"]]
    assert not faults, f"{len(faults)} of {len(numbers)} equation numbers not beside their equation on paper: {faults}"


def test_figures_keep_their_shape_in_the_pdf():
    placed = misshapen_images(PDF)
    assert not placed, f"{len(placed)} images off their shape:\n" + "\n".join(placed[:10])


def test_the_shape_check_finds_a_squashed_figure(tmp_path):
    """The check above can fail: a 200 x 100 image placed in a square is found, placed at 2:1 it is not."""
    import pypdfium2 as pdfium
    from PIL import Image

    for (width, height), squashed in (((200, 200), True), ((200, 100), False)):
        document = pdfium.PdfDocument.new()
        page = document.new_page(400, 400)
        image = pdfium.PdfImage.new(document)
        image.set_bitmap(pdfium.PdfBitmap.from_pil(Image.new("RGB", (200, 100), "red")))
        image.set_matrix(pdfium.PdfMatrix().scale(width, height).translate(50, 50))
        page.insert_obj(image)
        page.gen_content()
        path = tmp_path / f"figure-{width}x{height}.pdf"
        document.save(path)
        assert bool(misshapen_images(path)) == squashed, (width, height)
