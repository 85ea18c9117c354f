"""Every citation in the book resolves to book/references.bib, and every entry there is cited."""

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BIB = ROOT / "book" / "references.bib"
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def cited_keys():
    keys = {}
    for path in sorted((ROOT / "book").glob("*.md")) + sorted((ROOT / "book").glob("*.ipynb")):
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
        else:
            text = path.read_text()
        for group in CITE.findall(text):
            for key in group.split(","):
                keys.setdefault(key.strip(), set()).add(path.name)
    return keys


def bib_entries():
    text = BIB.read_text()
    return dict(re.findall(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S))


def test_every_citation_has_an_entry():
    missing = sorted(set(cited_keys()) - set(bib_entries()))
    assert not missing, f"cited but not in references.bib: {missing}"


def test_every_entry_is_cited():
    uncited = sorted(set(bib_entries()) - set(cited_keys()))
    assert not uncited, f"in references.bib but cited nowhere: {uncited}"


def test_entries_have_a_year_and_papers_an_arxiv_id():
    for key, body in bib_entries().items():
        assert re.search(r"year\s*=\s*\{\d{4}[ab]?\}", body), key  # 2024a, 2024b: one author, one year
        if "eprint" in body:
            assert re.search(r"eprint\s*=\s*\{\d{4}\.\d{4,5}\}", body), key
    # Every paper the book discusses at length is on arXiv; GPT-2's report is the one exception.
    # Without an arXiv id: GPT-2's report, Holm's multiple-test procedure (a 1979 journal article,
    # cited for one sentence; it must name its journal), the two forum posts that introduced NTK-aware and
    # dynamic NTK RoPE scaling (the YaRN paper credits them), Meta's Llama 4 announcement (no
    # paper describes iRoPE), Hugging Face's SmolLM3 post (its report is a blog post) and Qwen2.5's
    # model card (where the YaRN block to add is written); all but the first name where they
    # appeared, in the field given here.
    where = {
        "radford2019gpt2": None,
        "bloc97_2023ntk": "howpublished",
        "emozilla_2023dynamic": "howpublished",
        "meta2025llama4": "howpublished",
        "hf2025smollm3": "howpublished",
        "qwen2024qwen25card": "howpublished",
        "holm1979": "journal",
    }
    no_eprint = [k for k, body in bib_entries().items() if "eprint" not in body]
    assert no_eprint == list(where)
    for key, field in where.items():
        assert field is None or re.search(rf"\b{field}\s*=", bib_entries()[key]), key


def test_the_bibliography_page_lists_the_entries():
    assert "```{bibliography}" in (ROOT / "book" / "bibliography.md").read_text()


def test_each_chapter_cites_something():
    chapters = {name for names in cited_keys().values() for name in names}
    for path in sorted((ROOT / "book").glob("[0-9][0-9]*_*.ipynb")):
        assert path.name in chapters, f"{path.name} cites no paper"
